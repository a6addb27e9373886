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
# # Causal self-attention in NumPy: the lesson
#
# Causal self-attention in NumPy, the lesson: the seven steps and nothing else.
#
# NumPy is the plain reference: each line computes when it runs, on the CPU.
# attention.py computes the same numbers, bit for bit, and adds what a library
# needs (docs/reading.md shows why). Shapes: B batch (any leading axes, written
# ...), T sequence, C model width, H heads, D head width (C // H).
#
# This notebook needs NumPy only, which Colab has.

# %%
import math

import numpy as np

# %%
def single_head_attention(x, w_q, w_k, w_v):
    """x (..., T, C); w_q, w_k, w_v (C, D) -> out (..., T, D), weights (..., T, T)."""
    T, D = x.shape[-2], w_q.shape[-1]
    # 1. project x into queries, keys and values
    q, k, v = x @ w_q, x @ w_k, x @ w_v  # (..., T, C) @ (C, D) -> (..., T, D)
    # 2. split heads (multi-head only)
    # 3. scores = q @ k^T
    scores = q @ k.mT  # (..., T, D) @ (..., D, T) -> (..., T, T)
    # 4. scale by 1 / sqrt(D)
    scores = scores / math.sqrt(D)
    # 5. mask the future
    causal = np.tril(np.ones((T, T), dtype=bool))  # (T, T)
    scores = np.where(causal, scores, -np.inf)  # (..., T, T)
    # 6. softmax into weights
    exp = np.exp(scores - scores.max(axis=-1, keepdims=True))  # (..., T, T)
    weights = exp / exp.sum(axis=-1, keepdims=True)  # (..., T, T)
    # 7. weighted sum of values
    out = weights @ v  # (..., T, T) @ (..., T, D) -> (..., T, D)
    return out, weights

# %%
def multi_head_attention(x, w_q, w_k, w_v, w_o, n_heads):
    """x (..., T, C); w_* (C, C) -> out (..., T, C), weights (..., H, T, T)."""
    *B, T, C = x.shape
    H, D = n_heads, C // n_heads
    # 1. project x into queries, keys and values
    q, k, v = x @ w_q, x @ w_k, x @ w_v  # (..., T, C) @ (C, C) -> (..., T, C)
    # 2. split heads (multi-head only)
    q = q.reshape(*B, T, H, D).swapaxes(-3, -2)  # (..., T, C) -> (..., H, T, D)
    k = k.reshape(*B, T, H, D).swapaxes(-3, -2)  # (..., T, C) -> (..., H, T, D)
    v = v.reshape(*B, T, H, D).swapaxes(-3, -2)  # (..., T, C) -> (..., H, T, D)
    # 3. scores = q @ k^T
    scores = q @ k.mT  # (..., H, T, D) @ (..., H, D, T) -> (..., H, T, T)
    # 4. scale by 1 / sqrt(D)
    scores = scores / math.sqrt(D)
    # 5. mask the future
    causal = np.tril(np.ones((T, T), dtype=bool))  # (T, T)
    scores = np.where(causal, scores, -np.inf)  # (..., H, T, T)
    # 6. softmax into weights
    exp = np.exp(scores - scores.max(axis=-1, keepdims=True))  # (..., H, T, T)
    weights = exp / exp.sum(axis=-1, keepdims=True)  # (..., H, T, T)
    # 7. weighted sum of values
    out = weights @ v  # (..., H, T, T) @ (..., H, T, D) -> (..., H, T, D)
    # 7. (continued) merge heads, output projection
    out = out.swapaxes(-3, -2).reshape(*B, T, C)  # (..., H, T, D) -> (..., T, C)
    out = out @ w_o  # (..., T, C) @ (C, C) -> (..., T, C)
    return out, weights

# %% [markdown]
# ## The float64 oracle: the same attention in plain loops

# %%
def oracle(x, w_q, w_k, w_v, w_o=None, n_heads=1):
    """Causal self-attention in float64, one query and one head at a time,
    in plain loops: out (..., T, C or D)."""
    x, w_q, w_k, w_v = (np.asarray(a, np.float64) for a in (x, w_q, w_k, w_v))
    *B, T, _ = x.shape
    D = w_q.shape[1] // n_heads
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    out = np.zeros((*B, T, w_q.shape[1]))
    for b in np.ndindex(*B):
        for h in range(n_heads):
            cols = slice(h * D, (h + 1) * D)
            for i in range(T):
                scores = [q[b][i, cols] @ k[b][j, cols] / math.sqrt(D)
                          for j in range(i + 1)]  # keys 0 to i only
                top = max(scores)
                e = [math.exp(s - top) for s in scores]
                out[b][i, cols] = sum(w / sum(e) * v[b][j, cols]
                                      for j, w in enumerate(e))
    return out if w_o is None else out @ np.asarray(w_o, np.float64)

# %% [markdown]
# ## The lesson against the oracle, in float32

# %%
def f32(a):
    return np.asarray(a, np.float32)


def f64(a):
    return np.asarray(a, np.float64)


rng = np.random.default_rng(0)
x = rng.standard_normal((2, 6, 8))  # (B, T, C)
w = [rng.standard_normal((8, 8)) / math.sqrt(8) for _ in range(4)]
one = [a[:, :4] for a in w[:3]]  # one head of width D = 4
ATOL, RTOL = 2e-05, 2e-05  # float32's tolerance (shared/tolerances.py)

out, weights = single_head_attention(f32(x), *map(f32, one))
distance = np.abs(f64(out) - oracle(x, *one)).max()
print(f"one head: max |out - oracle| = {distance:.2e}")
assert np.allclose(f64(out), oracle(x, *one), atol=ATOL, rtol=RTOL)

out, weights = multi_head_attention(f32(x), *map(f32, w), 2)
distance = np.abs(f64(out) - oracle(x, *w, n_heads=2)).max()
print(f"two heads: max |out - oracle| = {distance:.2e}")
assert np.allclose(f64(out), oracle(x, *w, n_heads=2), atol=ATOL, rtol=RTOL)

# %% [markdown]
# Try it: change step 5 to keep the other triangle, rerun, and the
# distance to the oracle grows. The exercises (exercises/README.md in the
# repository) ask for these lines one step at a time, with a grader that names
# the mistake.
