"""Attention with a mistake, computed on purpose: in float64 NumPy, on the
inputs an implementation was given, at its adapter's level (`mistaken`).

`mistaken(None, ...)` is attention with no mistake: a vectorized twin of the
loop oracle, which the tests hold to it. `core` is steps 3 to 7 with a
mistake, `variant_mistaken` the multi-head signatures with the run's variant,
`flattened` a batch merged into one sequence; the rest are the mistaken
pieces (heads split or merged without the transpose) and the variant's
(QK-norm, rotary positions, ALiBi's bias).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from triptych.check.mistakes.known import Mistake
from triptych.check.problems import (
    Inputs,
    merge_heads,
    qkv_of,
    single_head_mask,
    split_heads,
)


class Mistaken(NamedTuple):
    """Results of attention with a mistake, at an adapter's level.

    Attributes:
        out: (..., T, C) for x and the weights, (..., H, T, D) for q, k, v.
        weights: (..., H, T, T).
        rows: booleans, the shape of out without its last axis: the rows that
            attend some key (in every head, for out (..., T, C)). Only these
            are compared: the others follow a policy of their own.
    """

    out: np.ndarray
    weights: np.ndarray
    rows: np.ndarray


def mistaken(
    mistake: Mistake | None, inputs: Inputs, dtype: str, level: str, one_head: bool
) -> Mistaken:
    """Attention with `mistake` (None: none), float64, on `inputs` rounded to
    `dtype`, at `level` ("x": from x and the weights; "qkv": from q, k, v)."""
    name = mistake.name if mistake else ""
    H = inputs.H
    if inputs.variant is not None and level == "x" and not one_head:
        return variant_mistaken(name, inputs, dtype)
    if level == "qkv":
        q, k, v = qkv_of(inputs, dtype).values()
        C = H * q.shape[-1]
    else:
        rounded = inputs.rounded(dtype)
        w = rounded.w
        if name == "transposed":
            w = {n: a.T for n, a in w.items()}
        split = straight_split if name == "split" else split_heads
        q, k, v = (split(rounded.x @ w[f"w_{n}"], H) for n in "qkv")
        C = rounded.x.shape[-1]
    mask = inputs.mask
    if mask is not None and one_head:
        mask = single_head_mask(mask)[..., None, :, :]
    if name == "batch flattened":
        out, weights, defined = flattened(q, k, v, mask, C)
    else:
        out, weights, defined = core(q, k, v, mask, name, C)
    if level == "qkv":
        return Mistaken(out, weights, defined)
    merged = straight_merge(out) if name == "merge" else merge_heads(out)
    if not one_head:
        merged = merged @ w["w_o"]
    return Mistaken(merged, weights, defined.all(axis=-2))


def core(q, k, v, mask, name: str, C: int, variant=None, sinks=None):
    """Steps 3 to 7 on q, k, v (..., H, T, D) with the mistake `name`:
    out (..., H, T, D), weights (..., H, T, T), and the rows (..., H, T) that
    attend some key. A row with no key gets zero weights. With a `variant`:
    its cap and ALiBi on the scaled scores, its window on the mask, the
    `sinks` (H,) in the softmax's denominator."""
    T, D = q.shape[-2], q.shape[-1]
    factor = {
        "scale missing": 1.0,
        "scale 1/D": 1.0 / D,
        "scale 1/sqrt(C)": 1.0 / math.sqrt(C),
        "scale times": math.sqrt(D),
    }.get(name, 1.0 / math.sqrt(D))
    scores = (q @ k.swapaxes(-1, -2)) * factor  # (..., H, T, T)
    cap = None if variant is None or name == "softcap ignored" else variant.softcap
    if cap is not None and name == "softcap before scale":
        cap /= math.sqrt(D)  # c tanh(s sqrt(D) / c) / sqrt(D) = c' tanh(s / c')
    if cap is not None and name != "softcap after mask":
        scores = cap * np.tanh(scores / cap)
    if variant is not None and variant.alibi:
        scores = scores + alibi_bias(name, q.shape[-3], T, D)
    offset = {"offset 1": 1, "diagonal masked": -1}.get(name, 0)
    causal = np.tril(np.ones((T, T), dtype=bool), k=offset)
    if name in ("not causal", "mask replaces causal"):
        causal = np.ones((T, T), dtype=bool)
    elif name in ("causal reversed", "causal inverted"):
        causal = np.triu(np.ones((T, T), dtype=bool), k=int(name == "causal inverted"))
    allowed = np.broadcast_to(causal, scores.shape)
    if mask is not None:
        given = {
            "mask inverted": ~mask,
            "mask ignored": True,
            "mask transposed": mask.swapaxes(-1, -2),
        }.get(name, mask)
        allowed = allowed & given
    if variant is not None and variant.window is not None and name != "window ignored":
        W = variant.window + {"window W+1": 1, "window W-1": -1}.get(name, 0)
        allowed = allowed & ~np.tril(np.ones((T, T), dtype=bool), k=-W)
    sink = -np.inf if sinks is None else np.asarray(sinks)[:, None, None]  # (H, 1, 1)
    if name in ("mask fill -1e4", "softcap after mask"):  # every key in the softmax
        if name == "mask fill -1e4":
            filled = np.where(allowed, scores, -1e4)
        else:  # c tanh(-inf / c) = -c where masked
            filled = cap * np.tanh(np.where(allowed, scores, -np.inf) / cap)
        top = np.maximum(filled.max(axis=-1, keepdims=True), sink)
        exp = np.exp(filled - top)
        weights = exp / (exp.sum(axis=-1, keepdims=True) + np.exp(sink - top))
        return weights @ v, weights, allowed.any(axis=-1)
    axis = -2 if name == "query axis" else -1
    top = np.where(allowed, scores, -np.inf).max(axis=axis, keepdims=True)
    top = np.maximum(top, sink)
    top = np.where(np.isfinite(top), top, 0.0)
    exp = np.where(allowed, np.exp(np.where(allowed, scores - top, 0.0)), 0.0)
    total = exp.sum(axis=axis, keepdims=True) + np.exp(sink - top)
    if name == "denominator":  # every key in the sum, the masked ones too
        top = scores.max(axis=-1, keepdims=True)
        exp = np.where(allowed, np.exp(scores - top), 0.0)
        total = np.exp(scores - top).sum(axis=-1, keepdims=True)
    weights = exp / np.where(total == 0, 1.0, total)
    return weights @ v, weights, allowed.any(axis=-1)


def alibi_bias(name: str, H: int, T: int, D: int) -> np.ndarray:
    """ALiBi's slope_h (j - i), (H, T, T), with the mistake `name` (one of
    known.py's "alibi ..."; any other: none), before the scale where the
    mistake puts it there (divided by sqrt(D))."""
    from shared.variants import alibi_slopes

    h, P = np.arange(H), 2 ** math.floor(math.log2(H))
    own = 2.0 ** (-8.0 * (h[:P] + 1) / P)  # the slopes of P heads
    slopes = {
        "alibi repeated": np.concatenate([own, own[: H - P]]),
        "alibi reversed": np.asarray(alibi_slopes(H))[::-1],
        "alibi from 0": 2.0 ** (-8.0 * h / H),
        "alibi geometric": 2.0 ** (-8.0 * (h + 1) / H),
        "alibi truncated": 2.0 ** (-8.0 * (h + 1) / 2 ** math.ceil(math.log2(H))),
        "alibi ignored": np.zeros(H),
    }.get(name, np.asarray(alibi_slopes(H)))
    distance = np.arange(T) - np.arange(T)[:, None]  # j - i, (T, T)
    if name == "alibi sign":
        distance = -distance
    bias = slopes[:, None, None] * distance  # (H, T, T)
    return bias / math.sqrt(D) if name == "alibi before scale" else bias


def variant_mistaken(name: str, inputs: Inputs, dtype: str) -> Mistaken:
    """`mistaken` for the multi-head signatures with the run's variant
    (docs/variants.md's order): QK-norm, rotary positions, the KV head of
    each query head, then `core` with the cap, ALiBi, the window and the
    sinks."""
    rounded = inputs.rounded(dtype)
    variant, w, extra = inputs.variant, rounded.w, rounded.extra
    H, H_kv = inputs.H, inputs.H_kv
    q = split_heads(rounded.x @ w["w_q"], H)  # (..., H, T, D)
    k, v = (split_heads(rounded.x @ w[n], H_kv) for n in ("w_k", "w_v"))
    if variant.qk_norm:
        q, k = rms_norm(q, extra["q_norm"]), rms_norm(k, extra["k_norm"])
    if variant.rotary is not None:
        style = variant.rotary.style
        if name == "rotary style":
            style = "gptj" if style == "neox" else "neox"
        q, k = rotated(q, variant.rotary, style), rotated(k, variant.rotary, style)
    G = H // H_kv
    group = np.arange(H) % H_kv if name == "gqa order" else np.arange(H) // G
    k, v = k[..., group, :, :], v[..., group, :, :]
    C = rounded.x.shape[-1]
    if name == "batch flattened":
        out, weights, defined = flattened(q, k, v, inputs.mask, C)
    else:
        out, weights, defined = core(
            q, k, v, inputs.mask, name, C, variant, extra.get("sinks")
        )
    merged = straight_merge(out) if name == "merge" else merge_heads(out)
    return Mistaken(merged @ w["w_o"], weights, defined.all(axis=-2))


def rms_norm(t: np.ndarray, weight: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """t / sqrt(mean(t ** 2) + eps) * weight over the last axis."""
    return t / np.sqrt((t * t).mean(axis=-1, keepdims=True) + eps) * weight


def rotated(t: np.ndarray, rotary, style: str) -> np.ndarray:
    """(..., T, D) with pair m of its first R features turned by position *
    base ** (-2m / R), the pairs of `style` (shared.variants.ROTARY_STYLES)."""
    from shared.variants import inverse_frequencies, rotary_width

    T, D = t.shape[-2:]
    R = rotary_width(D, rotary.fraction)
    angle = np.arange(T)[:, None] * inverse_frequencies(R, rotary.base)  # (T, R/2)
    m = np.arange(R // 2)
    a, b = (m, m + R // 2) if style == "neox" else (2 * m, 2 * m + 1)
    turned = t.copy()
    turned[..., a] = t[..., a] * np.cos(angle) - t[..., b] * np.sin(angle)
    turned[..., b] = t[..., a] * np.sin(angle) + t[..., b] * np.cos(angle)
    return turned


def flattened(q, k, v, mask, C: int):
    """`core` on the batch items as one sequence (..., H, T, D) ->
    (H, N * T, D), N items: out and the rows back in the batch's shape, the
    weights each item's own block. With a given mask (whose items cannot be
    merged) it is the truth: these inputs cannot tell."""
    *batch, H, T, D = q.shape
    N = int(np.prod(batch, dtype=int))
    if mask is not None or N < 2:
        return core(q, k, v, mask, "", C)

    def merged(t):
        return t.reshape(N, H, T, D).swapaxes(0, 1).reshape(H, N * T, D)

    out, weights, rows = core(merged(q), merged(k), merged(v), None, "", C)
    out = out.reshape(H, N, T, D).swapaxes(0, 1).reshape(*batch, H, T, D)
    blocks = weights.reshape(H, N, T, N, T)
    own = np.stack([blocks[:, n, :, n, :] for n in range(N)])  # (N, H, T, T)
    rows = rows.reshape(H, N, T).swapaxes(0, 1).reshape(*batch, H, T)
    return out, own.reshape(*batch, H, T, T), rows


def straight_split(t: np.ndarray, H: int) -> np.ndarray:
    """The mistake: (..., T, C) reshaped to (..., H, T, D) with no transpose."""
    *batch, T, C = t.shape
    return t.reshape(*batch, H, T, C // H)


def straight_merge(t: np.ndarray) -> np.ndarray:
    """The mistake: (..., H, T, D) reshaped to (..., T, H * D) with no transpose."""
    *batch, H, T, D = t.shape
    return t.reshape(*batch, T, H * D)
