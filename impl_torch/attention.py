"""Causal self-attention in PyTorch: the seven steps, with what a library adds.

Read lesson.py first: the same seven steps and nothing else. Here each step is
still a line or two; what a library must add (validation, masks, rows with
nothing to attend, NaN behind a mask, half precision) is a named helper in the
policy section at the bottom, and docs/contract.md says what each promises.
impl_numpy, impl_torch and impl_jax hold the same file: diff two to see the idioms.

Shape legend: B batch (any leading axes, written ...), T sequence,
C model width (d_model), H heads, D head width (d_head = C // H).
"""

from __future__ import annotations

import math

import torch

from impl_torch.arrays import FRAMEWORK
from impl_torch.variants import (
    make_score_mod,
    normed_and_rotated,
    repeat_kv,
    softmax_with_sinks,
    window_mask,
)
from shared.validation import (
    QK_NORM_EPS,
    check_key_padding,
    check_multi_head,
    check_single_head,
    check_variant,
    check_weights,
)


def single_head_attention(
    x, w_q, w_k, w_v, mask=None, *, scale=True, b_q=None, b_k=None, b_v=None
):
    """One head of causal self-attention (docs/contract.md).

    Args:
        x: (..., T, C) inputs. w_q, w_k, w_v: (C, D) projections, x @ w.
        mask: None, or bool broadcastable to (..., T, T), True = may attend.
        scale: divide scores by sqrt(D).
        b_q, b_k, b_v: None, or (D,) biases: x @ w + b.

    Returns:
        out (..., T, D) and weights (..., T, T), in x's dtype.
    """
    biases = dict(b_q=b_q, b_k=b_k, b_v=b_v)
    T = check_single_head(x, w_q, w_k, w_v, mask, framework=FRAMEWORK, **biases).T
    # 1. project x into queries, keys and values
    q = project(x, w_q, b_q)  # (..., T, C) @ (C, D) -> (..., T, D)
    k = project(x, w_k, b_k)  # (..., T, C) @ (C, D) -> (..., T, D)
    v = project(x, w_v, b_v)  # (..., T, C) @ (C, D) -> (..., T, D)
    # 2. split heads (multi-head only)
    # 5. (ahead) who may attend whom: the causal mask, and any given mask
    allowed = allowed_keys(T, mask, device=x.device)  # (..., T, T)
    out, weights = attend(q, k, v, allowed, scale)  # steps 3 to 7
    return out.to(x.dtype), weights.to(x.dtype)


def multi_head_attention(
    x,
    w_q,
    w_k,
    w_v,
    w_o,
    n_heads,
    mask=None,
    *,
    scale=True,
    b_q=None,
    b_k=None,
    b_v=None,
    b_o=None,
    n_kv_heads=None,
    head_dim=None,
    rotary=None,
    positions=None,
    window=None,
    alibi=False,
    softcap=None,
    sinks=None,
    q_norm=None,
    k_norm=None,
    qk_norm_eps=QK_NORM_EPS,
):
    """Multi-head causal self-attention (docs/contract.md).

    Args:
        x: (..., T, C) inputs. w_q, w_k, w_v, w_o: (C, C) projections, x @ w.
        n_heads: H, which must divide C.
        mask: None, or bool broadcastable to (..., H, T, T), True = may attend.
        scale: divide scores by sqrt(D), D = C // H.
        b_q, b_k, b_v, b_o: None, or (C,) biases: x @ w + b.
        n_kv_heads, head_dim, rotary, positions, window, alibi, softcap,
            sinks, q_norm, k_norm, qk_norm_eps: the variants of modern
            attention, each off by default (docs/variants.md).

    Returns:
        out (..., T, C) and weights (..., H, T, T), in x's dtype.
    """
    biases = dict(b_q=b_q, b_k=b_k, b_v=b_v, b_o=b_o)
    heads = dict(n_kv_heads=n_kv_heads, head_dim=head_dim)
    dims = check_multi_head(
        x, w_q, w_k, w_v, w_o, n_heads, mask, framework=FRAMEWORK, **heads, **biases
    )
    variant = check_variant(
        x, dims, x.shape[:-1], framework=FRAMEWORK, n_kv_heads=n_kv_heads,
        rotary=rotary, positions=positions, window=window, alibi=alibi,
        softcap=softcap, sinks=sinks, q_norm=q_norm, k_norm=k_norm,
        qk_norm_eps=qk_norm_eps,
    )  # fmt: skip
    # 1. project x into queries, keys and values
    q = project(x, w_q, b_q)  # (..., T, C) @ (C, C) -> (..., T, C)
    k = project(x, w_k, b_k)  # (..., T, C) @ (C, C) -> (..., T, C)
    v = project(x, w_v, b_v)  # (..., T, C) @ (C, C) -> (..., T, C)
    # 2. split heads (multi-head only)
    q = split_heads(q, dims.H)  # (..., T, C) -> (..., H, T, D)
    k = split_heads(k, n_kv_heads or dims.H)  # (..., T, C) -> (..., H, T, D)
    v = split_heads(v, n_kv_heads or dims.H)  # (..., T, C) -> (..., H, T, D)
    # 5. (ahead) who may attend whom: the causal mask, and any given mask
    allowed = allowed_keys(dims.T, mask, device=x.device)  # (..., T, T)
    score_mod = None  # soft-capping, ALiBi
    if variant is not None:  # GQA, QK-norm, RoPE, the window, ...: variants.py
        q, k, v, allowed, score_mod = with_variant(q, k, v, allowed, variant)
    out, weights = attend(q, k, v, allowed, scale, score_mod, sinks)  # steps 3 to 7
    # 7. (continued) merge heads, output projection
    out = merge_heads(out.to(x.dtype))  # (..., H, T, D) -> (..., T, C)
    out = project(out, w_o, b_o)  # (..., T, C) @ (C, C) -> (..., T, C)
    return out, weights.to(x.dtype)


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


def attention_entropy(weights):
    """Entropy in nats of each row (last axis) of attention weights, 0 log 0 = 0:
    (..., T) -> (...,), in weights' dtype."""
    check_weights(weights, framework=FRAMEWORK)
    p = at_least_float32(weights)
    p_log_p = p * torch.log(torch.where(p > 0, p, 1.0))  # log 1 = 0 where p = 0
    return (-p_log_p.sum(dim=-1)).to(weights.dtype)


# Heads and projections, shared by every file of this backend.


def split_heads(t, H):
    """(..., T, C) -> (..., H, T, D)."""
    *batch, T, C = t.shape
    return t.reshape(*batch, T, H, C // H).transpose(-3, -2)  # (..., H, T, D)


def merge_heads(t):
    """(..., H, T, D) -> (..., T, C)."""
    *batch, H, T, D = t.shape
    return t.transpose(-3, -2).reshape(*batch, T, H * D)  # (..., T, C)


def with_variant(q, k, v, allowed, variant):
    """Plain attention's q (..., H, T, D), k, v (..., H_kv, T, D) and allowed
    (..., T, T) made the variant's (variants.py): q and k normed and rotated
    in at least float32, back in their dtype; each KV head repeated for its G
    query heads; the window narrowing allowed. Also the score_mod."""
    T = q.shape[-2]
    rows = torch.arange(
        T, device=q.device
    )  # (T,): the positions of the queries and the keys alike
    positions = rows if variant.positions is None else variant.positions
    q, k = positioned(q, k, positions, variant)
    k, v = repeat_kv(k, variant.groups), repeat_kv(v, variant.groups)  # (..., H, T, D)
    if variant.window is not None:
        allowed = allowed & window_mask(rows, rows, variant.window)  # (..., T, T)
    slopes = (
        None
        if variant.slopes is None
        else torch.tensor(variant.slopes, dtype=torch.float64, device=q.device)
    )  # (H,)
    return q, k, v, allowed, make_score_mod(variant.softcap, slopes, rows, rows)


def positioned(q, k, positions, variant):
    """q (..., H, T, D) and k (..., H_kv, T, D) through QK-norm and rotary
    positions (variants.normed_and_rotated), in at least float32, back in
    their dtype; positions broadcastable to (..., T)."""
    wide_q, wide_k = at_least_float32(q), at_least_float32(k)
    wide_q, wide_k = normed_and_rotated(wide_q, wide_k, positions, variant)
    return wide_q.to(q.dtype), wide_k.to(k.dtype)


def project(a, w, b=None):
    """a @ w, plus b if given, in at least float32, rounded to a's dtype."""
    dtype = a.dtype
    y = at_least_float32(a) @ at_least_float32(w)  # (..., T, C) @ (C, D) -> (..., T, D)
    if b is not None:
        y = y + at_least_float32(b)  # (..., T, D) + (D,)
    return y.to(dtype)


# Policy: masks, rows with nothing to attend, NaN and Inf, half precision.
# What each promises, and why: docs/contract.md.


def causal_mask(T, *, device=None):
    """(T, T) bool, True where query i may attend key j: j <= i (on `device`)."""
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()  # (T, T)


def allowed_keys(T, mask=None, *, device=None):
    """The causal mask, narrowed by `mask` if given: (..., T, T) bool."""
    causal = causal_mask(T, device=device)
    return causal if mask is None else causal & mask


def key_padding_mask(lengths_or_keep, T, *, multi_head=False):
    """A `mask` that hides padded keys: (..., 1, T), or (..., 1, 1, T) if
    `multi_head`, from integer lengths (...,) or a bool keep array (..., T)."""
    if check_key_padding(lengths_or_keep, T, framework=FRAMEWORK) == "lengths":
        positions = torch.arange(T, device=lengths_or_keep.device)  # (T,)
        keep = positions < lengths_or_keep[..., None]  # (..., T)
    else:
        keep = lengths_or_keep  # (..., T)
    keep = keep[..., None, :]  # (..., 1, T): the same keys for every query
    if multi_head:
        keep = keep[..., None, :, :]  # (..., 1, 1, T): and for every head
    return keep


def softmax_or_zeros(scores):
    """Softmax over the last axis; a row of only -inf gives zeros, not 0 / 0."""
    row_max = scores.amax(dim=-1, keepdim=True)  # (..., T, 1)
    row_max = torch.where(row_max == -math.inf, 0.0, row_max)  # fully masked row
    exp = torch.exp(scores - row_max)  # masked entries: exp(-inf) = 0
    row_sum = exp.sum(dim=-1, keepdim=True)  # (..., T, 1), 0 if fully masked
    return exp / torch.where(row_sum > 0, row_sum, 1.0)  # 0 / 1 = 0, never NaN


def finite_values(v):
    """v with the value of each key holding a NaN or Inf set to 0, so that a
    weight of 0 cannot make 0 * NaN = NaN in a row that may not attend it."""
    finite = torch.isfinite(v).all(dim=-1, keepdim=True)  # (..., T, 1)
    return torch.where(finite, v, 0.0)  # (..., T, D)


def nan_where_nonfinite_attended(out, v, allowed):
    """out, with NaN in each row that may attend a key whose value is not finite."""
    finite = torch.isfinite(v).all(dim=-1)  # (..., T): keys with a finite value
    attends_nonfinite = (allowed & ~finite[..., None, :]).any(dim=-1)  # (..., T)
    return torch.where(attends_nonfinite[..., None], math.nan, out)  # NaN in, NaN out


def at_least_float32(a):
    """float16 and bfloat16 -> float32; float32 and float64 unchanged."""
    return a.to(torch.promote_types(a.dtype, torch.float32))
