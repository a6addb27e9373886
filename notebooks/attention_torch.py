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
# # attention.py: the library's attention, in PyTorch
#
# Causal self-attention in PyTorch: the seven steps, with what a library adds.
#
# Read lesson.py first: the same seven steps and nothing else. Here each step is
# still a line or two; what a library must add (validation, masks, rows with
# nothing to attend, NaN behind a mask, half precision) is a named helper in the
# policy section at the bottom, and docs/contract.md says what each promises.
# impl_numpy, impl_torch and impl_jax hold the same file: diff two to see the idioms.
#
# Shape legend: B batch (any leading axes, written ...), T sequence,
# C model width (d_model), H heads, D head width (d_head = C // H).
#
# The first code cell installs the project where it is missing (in Colab). The
# functions are `impl_torch/attention.py`'s, as the page shows them: edit one and
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
from impl_torch.attention import (
    causal_mask, merge_heads, positioned, split_heads, unpack_biases,
)
from impl_torch.variants import repeat_kv, softmax_with_sinks, variant_scores
from shared.validation.attention import check_multi_head, check_single_head

# %%
def single_head_attention(x, w_q, w_k, w_v, mask=None, *, scale=True, biases=None):
    """One head of causal self-attention (docs/contract.md).

    Args:
        x: (..., T, C) inputs. w_q, w_k, w_v: (C, D) projections, x @ w.
        mask: None, or bool broadcastable to (..., T, T), True = may attend.
        scale: divide scores by sqrt(D).
        biases: None, or a dict of b_q, b_k, b_v, each (D,): x @ w + b.

    Returns:
        out (..., T, D) and weights (..., T, T), in x's dtype.
    """
    T = check_single_head(x, w_q, w_k, w_v, mask, biases=biases, framework=FRAMEWORK).T
    b_q, b_k, b_v, _ = unpack_biases(biases)
    # 1. project x into queries, keys and values
    q = project(x, w_q, b_q)  # (..., T, C) @ (C, D) -> (..., T, D)
    k = project(x, w_k, b_k)  # (..., T, C) @ (C, D) -> (..., T, D)
    v = project(x, w_v, b_v)  # (..., T, C) @ (C, D) -> (..., T, D)
    # 2. split heads (multi-head only)
    # 5. (ahead) who may attend whom: the causal mask, and any given mask
    allowed = allowed_keys(T, mask, device=x.device)  # (..., T, T)
    out, weights = attend(q, k, v, allowed, scale)  # steps 3 to 7
    return out.to(x.dtype), weights.to(x.dtype)

# %%
def multi_head_attention(
    x, w_q, w_k, w_v, w_o, n_heads, mask=None, *, scale=True, biases=None, variant=None
):
    """Multi-head causal self-attention (docs/contract.md): steps 1, 2 and 7 in
    `multi_head`, steps 3 to 7 in `attend` on every head at once (through
    `attend_heads`, the dense core).

    Args:
        x: (..., T, C) inputs. w_q, w_k, w_v, w_o: (C, C) projections, x @ w.
        n_heads: H, which must divide C.
        mask: None, or bool broadcastable to (..., H, T, T), True = may attend.
        scale: divide scores by sqrt(D), D = C // H.
        biases: None, or a dict of b_q, b_k, b_v, b_o, each (C,): x @ w + b.
        variant: None, or a shared.Variant: GQA, rotary positions, a window,
            ALiBi, soft-capping, sinks, QK-norm (docs/variants.md).

    Returns:
        out (..., T, C) and weights (..., H, T, T), in x's dtype.
    """
    dims, variant = check_multi_head(
        x, w_q, w_k, w_v, w_o, n_heads, mask, biases=biases, variant=variant,
        framework=FRAMEWORK,
    )  # fmt: skip
    # 5. (ahead) who may attend whom: the causal mask, and any given mask
    allowed = allowed_keys(dims.T, mask, device=x.device)  # (..., T, T)

    def core(q, k, v):  # steps 3 to 7, every head at once
        return attend_heads(q, k, v, allowed, scale, variant)

    return multi_head(x, (w_q, w_k, w_v, w_o), dims, core, biases, variant)

# %%
def multi_head(x, projections, dims, core, biases=None, variant=None):
    """The multi-head shell, the same around every core (`attend_heads`,
    blockwise, the flash kernel, decoding over a cache): steps 1, 2 and 7.

    core(q, k, v) takes q (..., H, T, D), k and v (..., H_kv, T, D), normed
    and rotated by the variant, and returns out (..., H, T, D) in q's dtype
    and what else it computes (weights, lse, a new cache), returned beside out.
    """
    w_q, w_k, w_v, w_o = projections
    b_q, b_k, b_v, b_o = unpack_biases(biases)
    # 1. project x into queries, keys and values
    q = project(x, w_q, b_q)  # (..., T, C) @ (C, C) -> (..., T, C)
    k = project(x, w_k, b_k)  # (..., T, C) @ (C, C) -> (..., T, C)
    v = project(x, w_v, b_v)  # (..., T, C) @ (C, C) -> (..., T, C)
    # 2. split heads (multi-head only)
    q = split_heads(q, dims.H)  # (..., T, C) -> (..., H, T, D)
    k = split_heads(k, dims.H_kv)  # (..., T, C) -> (..., H_kv, T, D)
    v = split_heads(v, dims.H_kv)  # (..., T, C) -> (..., H_kv, T, D)
    if variant is not None:  # QK-norm, rotary positions: variants.py
        q, k = positioned(q, k, variant)
    out, extra = core(q, k, v)  # steps 3 to 7, and what else the core computes
    # 7. (continued) merge heads, output projection
    out = merge_heads(out)  # (..., H, T, D) -> (..., T, C)
    out = project(out, w_o, b_o)  # (..., T, C) @ (C, C) -> (..., T, C)
    return out, extra

# %%
def attend(q, k, v, allowed, scale=True, score_mod=None, sinks=None):
    """Steps 3 to 7 on per-head q (..., Tq, D) and k, v (..., Tk, D), where
    `allowed` (bool, broadcastable to (..., Tq, Tk)) says who may attend whom;
    score_mod (soft-capping, ALiBi) and sinks (H,): variants.py's, if given.

    Returns out (..., Tq, D) and weights (..., Tq, Tk), in at least float32.
    """
    q, k, v = at_least_float32(q), at_least_float32(k), at_least_float32(v)
    # 3. scores = q @ k^T
    scores = q @ k.mT  # (..., T, D) @ (..., D, T) -> (..., T, T)
    # 4. scale by 1 / sqrt(D)
    if scale:
        scores = scores / math.sqrt(q.shape[-1])
    if score_mod is not None:
        scores = score_mod(scores)  # soft-capping, ALiBi: variants.py
    # 5. mask the future (and any given mask)
    scores = torch.where(allowed, scores, -math.inf)  # (..., T, T)
    # 6. softmax into weights
    if sinks is None:
        weights = softmax_or_zeros(scores)  # (..., T, T)
    else:
        weights = softmax_with_sinks(scores, sinks)  # (..., T, T): variants.py
    # 7. weighted sum of values
    out = weights @ finite_values(v)  # (..., T, T) @ (..., T, D) -> (..., T, D)
    out = nan_where_nonfinite_attended(out, v, allowed)  # (..., T, D)
    return out, weights

# %%
def attend_heads(q, k, v, allowed, scale=True, variant=None):
    """The dense core: `attend` on q (..., H, T, D) and k, v (..., H_kv, T, D)
    after the variant (variants.py): each KV head repeated for its G query
    heads, the window narrowing allowed, soft-capping, ALiBi, sinks.
    Returns out (..., H, T, D) and weights (..., H, T, T) in q's dtype."""
    score_mod, sinks = None, None
    if variant is not None:  # GQA, the window, soft-capping, ALiBi, sinks
        H, T = q.shape[-3], q.shape[-2]
        k, v = repeat_kv(k, variant.groups(H)), repeat_kv(v, variant.groups(H))
        rows = torch.arange(T, device=q.device)  # (T,): queries' and keys' positions
        reach, score_mod = variant_scores(variant, H, rows, rows)
        allowed = allowed if reach is None else allowed & reach  # (..., T, T)
        sinks = variant.sinks
    out, weights = attend(q, k, v, allowed, scale, score_mod, sinks)  # steps 3 to 7
    return out.to(q.dtype), weights.to(q.dtype)

# %%
def allowed_keys(T, mask=None, *, device=None):
    """The causal mask, narrowed by `mask` if given: (..., T, T) bool."""
    causal = causal_mask(T, device=device)
    return causal if mask is None else causal & mask

# %%
def softmax_or_zeros(scores):
    """Softmax over the last axis; a row of only -inf gives zeros, not 0 / 0."""
    row_max = scores.amax(dim=-1, keepdim=True)  # (..., T, 1)
    row_max = torch.where(row_max == -math.inf, 0.0, row_max)  # fully masked row
    exp = torch.exp(scores - row_max)  # masked entries: exp(-inf) = 0
    row_sum = exp.sum(dim=-1, keepdim=True)  # (..., T, 1), 0 if fully masked
    return exp / torch.where(row_sum > 0, row_sum, 1.0)  # 0 / 1 = 0, never NaN

# %%
def finite_values(v):
    """v with the value of each key holding a NaN or Inf set to 0, so that a
    weight of 0 cannot make 0 * NaN = NaN in a row that may not attend it."""
    finite = torch.isfinite(v).all(dim=-1, keepdim=True)  # (..., T, 1)
    return torch.where(finite, v, 0.0)  # (..., T, D)

# %%
def nan_where_nonfinite_attended(out, v, allowed):
    """out, with NaN in each row that may attend a key whose value is not finite."""
    finite = torch.isfinite(v).all(dim=-1)  # (..., T): keys with a finite value
    attends_nonfinite = (allowed & ~finite[..., None, :]).any(dim=-1)  # (..., T)
    return torch.where(attends_nonfinite[..., None], math.nan, out)  # NaN in, NaN out

# %%
def project(a, w, b=None):
    """a @ w, plus b if given, in at least float32, rounded to a's dtype."""
    dtype = a.dtype
    y = at_least_float32(a) @ at_least_float32(w)  # (..., T, C) @ (C, D) -> (..., T, D)
    if b is not None:
        y = y + at_least_float32(b)  # (..., T, D) + (D,)
    return y.to(dtype)

# %%
def at_least_float32(a):
    """float16 and bfloat16 -> float32; float32 and float64 unchanged."""
    return a.to(torch.promote_types(a.dtype, torch.float32))

# %% [markdown]
# ## Against the float64 oracle, in float32

# %%
from impl_torch.arrays import from_numpy, to_numpy
from shared.reference import reference_multi_head
from shared.tolerances import tolerance


def f32(a):  # a NumPy array as the framework's float32 array
    return from_numpy(np.asarray(a), "float32")


def f64(a):  # back to NumPy, in float64
    return np.asarray(to_numpy(a), np.float64)


ATOL, RTOL = tolerance("float32")  # float32's tolerance (docs/suite.md)
rng = np.random.default_rng(0)
x = rng.standard_normal((2, 6, 8))  # (B, T, C)
w = [rng.standard_normal((8, 8)) / math.sqrt(8) for _ in range(4)]  # (C, C)

# %%
# two heads, both sequences at once, under a key-padding mask: sequence 1
# padded on the left, its keys 0 and 1 hidden from every query and head, so
# that its queries 0 and 1, which may attend only keys 0 to i, attend nothing:
# rows of zeros, not 0 / 0 = NaN (the oracle's too)
keep = np.ones((2, 6), dtype=bool)  # (B, T): the keys that are tokens
keep[1, :2] = False
mask = keep[:, None, None, :]  # (B, 1, 1, T): the same for each head and query
# run as written, one operation at a time
attention = multi_head_attention
out, _ = attention(*map(f32, (x, *w)), 2, from_numpy(mask))
expected, _ = reference_multi_head(x, *w, 2, mask)
distance = np.abs(f64(out) - expected).max()
print(f"two heads, left-padded: max |out - oracle| = {distance:.2e}")
empty = np.abs(f64(out)[1, :2]).max()  # sequence 1's queries 0 and 1
print(f"rows with nothing to attend: max |out| = {empty}")
assert np.allclose(f64(out), expected, atol=ATOL, rtol=RTOL)

# %% [markdown]
# Try it: in `softmax_or_zeros` divide by `row_sum` as it is (drop the `where`),
# rerun: the rows with nothing to attend become 0 / 0 = NaN, and NaN is near
# nothing, the oracle's zeros least of all. docs/contract.md says what each
# helper promises.
