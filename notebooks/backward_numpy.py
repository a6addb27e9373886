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
# # backward.py: by hand and by autodiff, in NumPy
#
# The backward pass in NumPy, by hand: the seven forward steps in reverse.
#
# torch and JAX get these gradients from autodiff; here each step of
# attention.py is undone by hand, with its math (more in docs/backward.md).
# d_a is dL/da for a scalar loss L; given d_out, a function returns the
# vector-Jacobian product of `out`. A matmul y = a @ b gives d_a = d_y @ b^T and
# d_b = a^T @ d_y; an array used twice (x feeds q, k, v) sums its gradients.
# Shapes as in attention.py: ... batch, T, C, H heads, D = C // H.
#
# The first code cell installs the project where it is missing (in Colab). The
# functions are `impl_numpy/backward.py`'s, as the page shows them: edit one and
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

from impl_numpy.arrays import FRAMEWORK
from impl_numpy.attention import (
    allowed_keys, at_least_float32, attend, merge_heads, project,
    split_heads, unpack_biases,
)
from impl_numpy.backward import bias_backward, sum_over_positions
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
    b_q, b_k, b_v, _ = unpack_biases(biases)
    out_shape = (*dims.batch, dims.T, dims.D)
    check_d_out(d_out, x, out_shape, "(..., T, D)", framework=FRAMEWORK)
    dtype = x.dtype
    # forward again, keeping q, k, v (rounded as the forward rounds) and weights
    q = at_least_float32(project(x, w_q, b_q))  # (..., T, C) @ (C, D) -> (..., T, D)
    k = at_least_float32(project(x, w_k, b_k))  # (..., T, C) @ (C, D) -> (..., T, D)
    v = at_least_float32(project(x, w_v, b_v))  # (..., T, C) @ (C, D) -> (..., T, D)
    _, weights = attend(q, k, v, allowed_keys(dims.T, mask), scale)  # (..., T, T)
    x, w_q, w_k, w_v, d_out = (at_least_float32(a) for a in (x, w_q, w_k, w_v, d_out))
    # backward: the seven steps in reverse, from d_out to the inputs
    d_q, d_k, d_v = attend_backward(q, k, v, weights, d_out, scale)  # steps 7 to 3
    # 2. split heads (multi-head only)
    # 1. project x into queries, keys and values
    grads = project_backward(x, w_q, w_k, w_v, d_q, d_k, d_v)
    grads |= bias_backward(biases or {}, b_q=d_q, b_k=d_k, b_v=d_v)
    return {name: grad.astype(dtype) for name, grad in grads.items()}

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
    b_q, b_k, b_v, _ = unpack_biases(biases)
    out_shape = (*dims.batch, dims.T, dims.C)
    check_d_out(d_out, x, out_shape, "(..., T, C)", framework=FRAMEWORK)
    H, dtype = dims.H, x.dtype
    # forward again, keeping q, k, v, weights, merged heads (rounded as it rounds)
    q = split_heads(at_least_float32(project(x, w_q, b_q)), H)  # (..., H, T, D)
    k = split_heads(at_least_float32(project(x, w_k, b_k)), H)  # (..., H, T, D)
    v = split_heads(at_least_float32(project(x, w_v, b_v)), H)  # (..., H, T, D)
    heads, weights = attend(q, k, v, allowed_keys(dims.T, mask), scale)
    merged = at_least_float32(merge_heads(heads.astype(dtype)))  # (..., T, C)
    x, w_q, w_k, w_v, w_o, d_out = (
        at_least_float32(a) for a in (x, w_q, w_k, w_v, w_o, d_out)
    )
    # backward: the seven steps in reverse, from d_out to the inputs
    # 7. (continued) out = merged @ w_o: d_w_o = merged^T @ d_out, and
    #    d_merged = d_out @ w_o^T, split back into heads as merging moved it.
    d_w_o = sum_over_positions(merged, d_out)  # (C, C)
    d_heads = split_heads(d_out @ w_o.T, H)  # (..., T, C) -> (..., H, T, D)
    d_q, d_k, d_v = attend_backward(q, k, v, weights, d_heads, scale)  # 7 to 3
    # 2. split heads (multi-head only): undone by merging the gradients
    d_q = merge_heads(d_q)  # (..., H, T, D) -> (..., T, C)
    d_k = merge_heads(d_k)  # (..., H, T, D) -> (..., T, C)
    d_v = merge_heads(d_v)  # (..., H, T, D) -> (..., T, C)
    # 1. project x into queries, keys and values
    grads = project_backward(x, w_q, w_k, w_v, d_q, d_k, d_v)
    grads["w_o"] = d_w_o
    grads |= bias_backward(biases or {}, b_q=d_q, b_k=d_k, b_v=d_v, b_o=d_out)
    return {name: grad.astype(dtype) for name, grad in grads.items()}

# %%
def attend_backward(q, k, v, weights, d_out, scale):
    """Steps 7 to 3 in reverse on per-head arrays: d_out -> d_q, d_k, d_v."""
    # 7. out = P @ v, P the weights: d_P = d_out @ v^T, and d_v = P^T @ d_out
    #    (key j collects the gradient of every query i, in proportion to P[i, j]).
    d_weights = d_out @ v.mT  # (..., T, D) @ (..., D, T) -> (..., T, T)
    d_v = weights.mT @ d_out  # (..., T, T) @ (..., T, D) -> (..., T, D)
    # 6. P[i, j] = exp(S[i, j]) / sum_m exp(S[i, m]), whose Jacobian is
    #    ∂P[i, j] / ∂S[i, l] = P[i, j] * (1[j = l] - P[i, l]). By the chain rule,
    #      d_S[i, l] = sum_j d_P[i, j] * P[i, j] * (1[j = l] - P[i, l])
    #                = d_P[i, l] * P[i, l] - P[i, l] * sum_j d_P[i, j] * P[i, j]
    #                = P[i, l] * (d_P[i, l] - sum_j d_P[i, j] * P[i, j])
    #    Only P is needed, never the forward's max or exp.
    d_scores = weights * (d_weights - (d_weights * weights).sum(axis=-1, keepdims=True))
    # 5. nothing to undo: where P = 0 (masked) the factor P makes dS exactly 0,
    #    so no gradient reaches the future, and the -inf is never touched.
    # 4. S was multiplied by a constant, so dS is too.
    if scale:
        d_scores = d_scores / math.sqrt(q.shape[-1])
    # 3. S = q @ k^T: query i collects the keys it scored, key j the queries.
    d_q = d_scores @ k  # (..., T, T) @ (..., T, D) -> (..., T, D)
    d_k = d_scores.mT @ q  # (..., T, T) @ (..., T, D) -> (..., T, D)
    return d_q, d_k, d_v

# %%
def project_backward(x, w_q, w_k, w_v, d_q, d_k, d_v):
    """Step 1 in reverse: y = x @ w gives d_w = x^T @ d_y over every position,
    and d_x = d_y @ w^T, summed over q, k and v, which x all fed."""
    d_x = d_q @ w_q.T  # (..., T, D) @ (D, C) -> (..., T, C)
    d_x = d_x + d_k @ w_k.T  # (..., T, D) @ (D, C) -> (..., T, C)
    d_x = d_x + d_v @ w_v.T  # (..., T, D) @ (D, C) -> (..., T, C)
    return {
        "x": d_x,
        "w_q": sum_over_positions(x, d_q),
        "w_k": sum_over_positions(x, d_k),
        "w_v": sum_over_positions(x, d_v),
    }

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
