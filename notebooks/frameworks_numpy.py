# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # What each framework adds, in NumPy
#
# What NumPy adds to the lesson: broadcasting, no loop over heads needed; and
# what it lacks: autodiff (the gradient by hand, backward.py) and a fused
# attention (docs/reading.md, "What each framework adds").
#
# The first code cell installs the project where it is missing (in Colab). The
# functions are `impl_numpy/extras.py`'s, as the page shows them: edit one and
# rerun the cells below it.

# %%
# Setup: where the project is not importable (in Colab), install it from
# its repository with pip (Colab's own NumPy, torch and JAX are enough);
# where it is (a clone after `pip install -e .`), nothing happens.
import importlib
import importlib.util
import subprocess
import sys

REPOSITORY = "https://github.com/attention-triptych/attention-triptych"
if importlib.util.find_spec("impl_numpy") is None:
    print(f"installing attention-triptych from {REPOSITORY}")
    package = f"attention-triptych @ git+{REPOSITORY}"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", package], check=True)
    importlib.invalidate_caches()

# %%
import math

import numpy as np

from impl_numpy import lesson
from impl_numpy.backward import single_head_attention_backward

# %%
def heads_of(w, n_heads):
    """(C, C) -> (H, C, D): each head's columns of a projection."""
    C = w.shape[0]
    return w.reshape(C, n_heads, C // n_heads).swapaxes(0, 1)  # (C, H, D) -> (H, C, D)

# %%
def every_head(x, w_q, w_k, w_v, n_heads):
    """The one-head lesson on every head at once: out (H, T, D), weights (H, T, T)."""
    q_heads, k_heads, v_heads = (heads_of(w, n_heads) for w in (w_q, w_k, w_v))
    return lesson.single_head_attention(x, q_heads, k_heads, v_heads)  # broadcasts

# %%
def gradient(x, w_q, w_k, w_v):
    """dL/dw_q (C, D) for L = out.sum(): by hand, NumPy has no autodiff."""
    out, _ = lesson.single_head_attention(x, w_q, w_k, w_v)  # (T, D)
    d_out = np.ones_like(out)  # dL/dout for L = out.sum()
    grads = single_head_attention_backward(x, w_q, w_k, w_v, d_out)  # backward.py
    return grads["w_q"]  # (C, D)

# %% [markdown]
# Not in NumPy's extras.py: `trace` (JAX's), `compiled` (JAX's), `compiled_heads`
# (JAX's), `as_layer` (PyTorch's), `call_layer` (PyTorch's). Nothing of the kind
# in this framework (the page that `triptych read` writes says why, in this
# chapter).

# %% [markdown]
# ## Against the float64 oracle, in float32

# %%
from impl_numpy.arrays import from_numpy, to_numpy
from shared.reference import reference_single_head
from shared.tolerances import tolerance


def f32(a):  # a NumPy array as the framework's float32 array
    return from_numpy(np.asarray(a), "float32")


def f64(a):  # back to NumPy, in float64
    return np.asarray(to_numpy(a), np.float64)


ATOL, RTOL = tolerance("float32")  # float32's tolerance (docs/suite.md)
rng = np.random.default_rng(0)
x = rng.standard_normal((2, 6, 8))  # (B, T, C)
w = [rng.standard_normal((8, 8)) / math.sqrt(8) for _ in range(4)]  # (C, C)
one = [a[:, :4] for a in w[:3]]  # w_q, w_k, w_v of one head of width D = 4

# %%
x0 = x[0]  # one sequence (T, C)
# the oracle of every head: one head at a time, on head h's columns (C, D)
columns = [slice(h * 4, (h + 1) * 4) for h in range(2)]
heads = np.stack([reference_single_head(x0, *(a[:, c] for a in w[:3]))[0]
                  for c in columns])  # (H, T, D)
# run as written, one operation at a time
over_heads = every_head
out, _ = over_heads(*map(f32, (x0, *w[:3])), 2)
distance = np.abs(f64(out) - heads).max()
print(f"every head at once: max |out - oracle| = {distance:.2e}")
assert np.allclose(f64(out), heads, atol=ATOL, rtol=RTOL)


def loss(w_q):  # the float64 oracle's L = out.sum(), one head
    return reference_single_head(x0, w_q, *one[1:])[0].sum()


step, expected = 1e-5, np.zeros_like(one[0])
for i in np.ndindex(expected.shape):  # central differences, entry by entry
    up, down = one[0].copy(), one[0].copy()
    up[i] += step
    down[i] -= step
    expected[i] = (loss(up) - loss(down)) / (2 * step)
grad = gradient(*map(f32, (x0, *one)))  # the framework's own way
distance = np.abs(f64(grad) - expected).max()
print(f"dL/dw_q: max |grad - oracle| = {distance:.2e}")
assert np.allclose(f64(grad), expected, atol=ATOL, rtol=RTOL)

# %% [markdown]
# Try it: in `heads_of` reshape to (H, C, D) at once, without the swap, rerun: a
# head gets a slab of rows of the (C, C) weight, not its own columns, and every
# head misses the oracle. The functions of one framework only (`trace`,
# `compiled`, `as_layer`) are the page's: docs/reading.md, "What each framework
# adds".
