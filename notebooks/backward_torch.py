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
# # backward.py: by hand and by autodiff, in PyTorch
#
# The backward pass in PyTorch: torch.autograd replays the forward in reverse.
#
# impl_numpy/backward.py writes each step's gradient by hand, with the math; here
# autograd records the forward of attention.py as it runs (the tape) and
# `torch.autograd.grad` walks it back. The suite proves the two equal.
# Shapes as in attention.py: ... batch, T, C, H heads, D = C // H.
#
# The first code cell installs the project where it is missing (in Colab). The
# functions are `impl_torch/backward.py`'s, as the page shows them: edit one and
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
import torch

from impl_torch.arrays import FRAMEWORK
from impl_torch.attention import multi_head_attention, single_head_attention
from impl_torch.backward import fresh_leaves, given, gradients
from shared.validation.attention import (
    check_d_out, check_multi_head, check_single_head,
)

# %%
def single_head_attention_backward(
    x, w_q, w_k, w_v, d_out, mask=None, *, scale=True, biases=None
):
    """Gradients of `single_head_attention` given d_out = dL/d out (..., T, D):
    {"x": (..., T, C), "w_q", "w_k", "w_v": (C, D)}, and "b_q", "b_k", "b_v"
    (D,) for the biases given, in x's dtype."""
    dims = check_single_head(x, w_q, w_k, w_v, mask, biases=biases, framework=FRAMEWORK)
    out_shape = (*dims.batch, dims.T, dims.D)
    check_d_out(d_out, x, out_shape, "(..., T, D)", framework=FRAMEWORK)
    inputs = {"x": x, "w_q": w_q, "w_k": w_k, "w_v": w_v}
    # fresh leaves of the tape, so that no caller's graph or .grad is touched
    leaves, bias_leaves = fresh_leaves(inputs), fresh_leaves(given(biases))
    # forward again: steps 1 to 7, recorded by autograd
    with torch.enable_grad():
        out, _ = single_head_attention(
            **leaves, mask=mask, scale=scale, biases=bias_leaves
        )
    # backward: the seven steps in reverse, from d_out to the inputs
    return gradients(out, d_out, leaves | bias_leaves)

# %%
def multi_head_attention_backward(
    x, w_q, w_k, w_v, w_o, n_heads, d_out, mask=None, *, scale=True, biases=None
):
    """Gradients of `multi_head_attention` given d_out = dL/d out (..., T, C):
    {"x": (..., T, C), "w_q", "w_k", "w_v", "w_o": (C, C)}, and "b_q", "b_k",
    "b_v", "b_o" (C,) for the biases given, in x's dtype."""
    dims, _ = check_multi_head(
        x, w_q, w_k, w_v, w_o, n_heads, mask, biases=biases, framework=FRAMEWORK
    )
    out_shape = (*dims.batch, dims.T, dims.C)
    check_d_out(d_out, x, out_shape, "(..., T, C)", framework=FRAMEWORK)
    inputs = {"x": x, "w_q": w_q, "w_k": w_k, "w_v": w_v, "w_o": w_o}
    # fresh leaves of the tape, so that no caller's graph or .grad is touched
    leaves, bias_leaves = fresh_leaves(inputs), fresh_leaves(given(biases))
    # forward again: steps 1 to 7, recorded by autograd
    with torch.enable_grad():
        out, _ = multi_head_attention(
            **leaves, n_heads=n_heads, mask=mask, scale=scale, biases=bias_leaves
        )
    # backward: the seven steps in reverse, from d_out to the inputs
    return gradients(out, d_out, leaves | bias_leaves)

# %% [markdown]
# Not in PyTorch's backward.py: `attend_backward` (NumPy's), `project_backward`
# (NumPy's). No such lines here: autodiff does this.

# %% [markdown]
# ## Against the float64 oracle, in float32

# %%
from impl_torch.arrays import from_numpy, to_numpy
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
# the gradients of L = sum(out * d_out), d_out = dL/d out (B, T, D)
d_out = rng.standard_normal((2, 6, 4))
# run as written, one operation at a time
backward = single_head_attention_backward
grads = backward(f32(x), *map(f32, one), f32(d_out))


def loss(x, w_q, w_k, w_v):  # the float64 oracle's L
    return (reference_single_head(x, w_q, w_k, w_v)[0] * d_out).sum()


def finite_differences(inputs, step=1e-5):
    """dL/d each entry of each input, by central differences of the oracle."""
    found = []
    for a in inputs:
        grad = np.zeros_like(a)
        for i in np.ndindex(a.shape):
            keep = a[i]
            a[i] = keep + step
            up = loss(*inputs)
            a[i] = keep - step
            grad[i] = (up - loss(*inputs)) / (2 * step)
            a[i] = keep
        found.append(grad)
    return found


inputs = [x.copy(), *(a.copy() for a in one)]
names = ("x", "w_q", "w_k", "w_v")
for name, expected in zip(names, finite_differences(inputs)):
    distance = np.abs(f64(grads[name]) - expected).max()
    print(f"d_{name}: max |grad - oracle| = {distance:.2e}")
    assert np.allclose(f64(grads[name]), expected, atol=ATOL, rtol=RTOL)

# %% [markdown]
# Try it (NumPy): in `attend_backward` drop the softmax's second term, the row
# sum, rerun, and the distance grows. In torch and JAX the backward is
# autodiff's, the tape's or the trace's, with no line of its own to break: set it
# beside NumPy's by hand. Exercise 5 (exercises/README.md) asks for the backward
# by hand.
