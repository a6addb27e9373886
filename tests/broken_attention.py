"""Attention with one classic mistake each, for `triptych check` to catch
(tests/test_numpy_check.py): the mistakes students make, and the ones fused
kernels and frameworks have made.

`attention` is right: our multi-head signature, NumPy, every step a small
function, nothing masked ever leaking (a masked key is left out of the sum,
not multiplied by 0) and a row with nothing to attend giving zeros. Each
broken version is `attention` with one step replaced (or, for the blockwise
one, written as FlashAttention's loop); EXPECTED says which property must
fail and what the diagnosis must say, ALSO a second property some of them
must fail, POLICIES the two policy differences (a NOTE by default, a FAIL
with --profile strict). TORCH_EXPECTED are torch versions (torch imported
inside them, so NumPy-only runs import this file) whose gradients are wrong.
Three do not compute at all: they loop forever, crash the interpreter, or
raise. `variant_attention` is right with multi_head_attention's variant
keywords (docs/variants.md); VARIANT_EXPECTED are its broken versions, the
mistakes of porting a variant, each with the options check is told.
"""

from __future__ import annotations

import math
import os

import numpy as np

from shared.variants import Rotary, alibi_slopes


def project(x, w):
    return x @ w  # (..., T, C) @ (C, C) -> (..., T, C)


def split(t, H):
    *B, T, C = t.shape
    return t.reshape(*B, T, H, C // H).swapaxes(-3, -2)  # (..., H, T, D)


def merge(t):
    *B, H, T, D = t.shape
    return t.swapaxes(-3, -2).reshape(*B, T, H * D)  # (..., T, C)


def scores_of(q, k):
    return q @ k.swapaxes(-1, -2) / math.sqrt(q.shape[-1])  # (..., H, T, T)


def allowed_of(T, mask):
    causal = np.tril(np.ones((T, T), dtype=bool))
    return causal if mask is None else causal & mask


def softmax(scores, allowed):
    top = np.where(allowed, scores, -np.inf).max(axis=-1, keepdims=True)
    exp = np.exp(
        np.where(allowed, scores - np.where(np.isfinite(top), top, 0), -np.inf)
    )
    total = exp.sum(axis=-1, keepdims=True)
    return exp / np.where(total == 0, 1, total)  # a row of nothing: zeros


def weighted(weights, v, allowed):
    # (..., H, T, T, 1) * (..., H, 1, T, D), masked terms left out, summed over keys
    terms = np.where(allowed[..., None], weights[..., None] * v[..., None, :, :], 0)
    return terms.sum(axis=-2)  # (..., H, T, D)


def attention(x, w_q, w_k, w_v, w_o, n_heads, mask=None, **steps):
    """Right: x (..., T, C), w (C, C) -> out (..., T, C), weights (..., H, T, T).
    `steps` replace the steps of the same name (the broken versions below)."""
    step = {
        "project": project,
        "split": split,
        "scores_of": scores_of,
        "allowed_of": allowed_of,
        "softmax": softmax,
        "weighted": weighted,
        "merge": merge,
        **steps,
    }
    q, k, v = (step["split"](step["project"](x, w), n_heads) for w in (w_q, w_k, w_v))
    allowed = step["allowed_of"](x.shape[-2], mask)
    weights = step["softmax"](step["scores_of"](q, k), allowed)
    out = step["merge"](step["weighted"](weights, v, allowed))
    return step["project"](out, w_o), weights


def transposed_weights(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """x @ w.T: the weights read as nn.Linear stores them."""
    return attention(x, w_q, w_k, w_v, w_o, n_heads, mask, project=lambda x, w: x @ w.T)


def no_scale(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    return attention(
        x,
        w_q,
        w_k,
        w_v,
        w_o,
        n_heads,
        mask,
        scores_of=lambda q, k: q @ k.swapaxes(-1, -2),
    )


def scaled_by_d(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    def scores(q, k):
        return q @ k.swapaxes(-1, -2) / q.shape[-1]

    return attention(x, w_q, w_k, w_v, w_o, n_heads, mask, scores_of=scores)


def scaled_by_model_width(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    def scores(q, k):
        return q @ k.swapaxes(-1, -2) / math.sqrt(x.shape[-1])

    return attention(x, w_q, w_k, w_v, w_o, n_heads, mask, scores_of=scores)


def softmax_over_queries(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    def over_queries(scores, allowed):
        return softmax(scores.swapaxes(-1, -2), allowed.swapaxes(-1, -2)).swapaxes(
            -1, -2
        )

    return attention(x, w_q, w_k, w_v, w_o, n_heads, mask, softmax=over_queries)


def inverted_mask(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """True read as may NOT attend, as nn.MultiheadAttention reads it."""
    mask = None if mask is None else ~mask
    return attention(x, w_q, w_k, w_v, w_o, n_heads, mask)


def mask_replaces_causal(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    def allowed(T, mask):
        return (
            allowed_of(T, None) if mask is None else np.broadcast_to(mask, mask.shape)
        )

    return attention(x, w_q, w_k, w_v, w_o, n_heads, mask, allowed_of=allowed)


def off_by_one(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """np.tril(..., k=1): each query sees one key of the future."""

    def allowed(T, mask):
        causal = np.tril(np.ones((T, T), dtype=bool), k=1)
        return causal if mask is None else causal & mask

    return attention(x, w_q, w_k, w_v, w_o, n_heads, mask, allowed_of=allowed)


def no_causal_mask(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    def allowed(T, mask):
        every = np.ones((T, T), dtype=bool)
        return every if mask is None else every & mask

    return attention(x, w_q, w_k, w_v, w_o, n_heads, mask, allowed_of=allowed)


def max_not_subtracted(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    def plain(scores, allowed):
        exp = np.where(allowed, np.exp(scores), 0)  # exp(1e4) = inf
        total = exp.sum(axis=-1, keepdims=True)
        return exp / np.where(total == 0, 1, total)

    return attention(x, w_q, w_k, w_v, w_o, n_heads, mask, softmax=plain)


def nan_for_fully_masked_rows(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """The textbook softmax: a row of -inf is 0 / 0."""

    def plain(scores, allowed):
        scores = np.where(allowed, scores, -np.inf)
        exp = np.exp(scores - scores.max(axis=-1, keepdims=True))  # -inf - -inf
        return exp / exp.sum(axis=-1, keepdims=True)

    return attention(x, w_q, w_k, w_v, w_o, n_heads, mask, softmax=plain)


def nan_leaks_through_the_mask(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """weights @ v: a masked weight is 0, and 0 * NaN = NaN."""
    return attention(
        x, w_q, w_k, w_v, w_o, n_heads, mask, weighted=lambda weights, v, _: weights @ v
    )


def heads_split_without_transpose(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    def straight(t, H):
        *B, T, C = t.shape
        return t.reshape(*B, H, T, C // H)

    return attention(x, w_q, w_k, w_v, w_o, n_heads, mask, split=straight)


def dropout_left_on(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    def dropped(scores, allowed):
        weights = softmax(scores, allowed)
        keep = np.random.default_rng().random(weights.shape) > 0.1
        return weights * keep / 0.9

    return attention(x, w_q, w_k, w_v, w_o, n_heads, mask, softmax=dropped)


def float32_inside(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """float64 computed in float32 (as JAX's fused kernel does); x's dtype out."""
    args = [
        a.astype(np.float32) if a.dtype == np.float64 else a
        for a in (x, w_q, w_k, w_v, w_o)
    ]
    out, weights = attention(*args, n_heads, mask)
    return out.astype(x.dtype), weights.astype(x.dtype)


def mask_ignored(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """Takes a mask and never reads it: only the causal mask."""
    return attention(x, w_q, w_k, w_v, w_o, n_heads, None)


def causal_reversed(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """np.triu where np.tril belongs: query i sees keys i to T - 1."""

    def allowed(T, mask):
        reversed_ = np.triu(np.ones((T, T), dtype=bool))
        return reversed_ if mask is None else reversed_ & mask

    return attention(x, w_q, w_k, w_v, w_o, n_heads, mask, allowed_of=allowed)


def causal_inverted(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """masked_fill(tril == 1, -inf): the keys before each query masked, the
    keys after it kept (the last query sees nothing)."""

    def allowed(T, mask):
        inverted = ~np.tril(np.ones((T, T), dtype=bool))
        return inverted if mask is None else inverted & mask

    return attention(x, w_q, w_k, w_v, w_o, n_heads, mask, allowed_of=allowed)


def denominator_leak(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """The numerator masked, the sum it is divided by over every key."""

    def leaky(scores, allowed):
        exp = np.exp(scores - scores.max(axis=-1, keepdims=True))
        return np.where(allowed, exp, 0) / exp.sum(axis=-1, keepdims=True)

    return attention(x, w_q, w_k, w_v, w_o, n_heads, mask, softmax=leaky)


def batch_flattened(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """x (B, T, C) reshaped to one sequence (B * T, C): item b sees every
    position of the items before it."""
    *B, T, C = x.shape
    flat = x.reshape(1, -1, C)
    out, weights = attention(flat, w_q, w_k, w_v, w_o, n_heads, None)
    n = flat.shape[1]
    blocks = weights.reshape(n_heads, -1, T, n)
    own = np.stack(
        [blocks[:, b, :, b * T : (b + 1) * T] for b in range(blocks.shape[1])]
    )
    return out.reshape(*B, T, C), own.reshape(*B, n_heads, T, T)


def mask_fill_minus_1e4(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """minGPT's masked_bias: masked scores set to -1e4, softmax over every key."""

    def filled(scores, allowed):
        scores = np.where(allowed, scores, -1e4)
        exp = np.exp(scores - scores.max(axis=-1, keepdims=True))
        return exp / exp.sum(axis=-1, keepdims=True)

    return attention(
        x,
        w_q,
        w_k,
        w_v,
        w_o,
        n_heads,
        mask,
        softmax=filled,
        weighted=lambda weights, v, _: weights @ v,
    )


def renormalised_after_masking(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """Softmax over every key, then the masked weights zeroed and the rest
    renormalised: right at ordinary scores, 0 / 0 where a masked key's score
    is far above the allowed ones."""

    def renormalised(scores, allowed):
        exp = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights = exp / exp.sum(axis=-1, keepdims=True)
        weights = np.where(allowed, weights, 0)
        return weights / weights.sum(axis=-1, keepdims=True)

    return attention(x, w_q, w_k, w_v, w_o, n_heads, mask, softmax=renormalised)


BLOCK = 16


def blockwise_without_rescale(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """Online softmax over blocks of 16 keys (FlashAttention's loop) that
    forgets to rescale the running sums when a later block raises the row
    max: right up to T = 16, wrong from the second block on."""
    T = x.shape[-2]
    q, k, v = (split(project(x, w), n_heads) for w in (w_q, w_k, w_v))
    allowed = allowed_of(T, mask)
    scores = np.broadcast_to(scores_of(q, k), (*q.shape[:-1], T))
    allowed = np.broadcast_to(allowed, scores.shape)
    top = np.full((*scores.shape[:-1], 1), -np.inf)
    total = np.zeros((*scores.shape[:-1], 1))
    acc = np.zeros(q.shape)
    for start in range(0, T, BLOCK):
        keys = slice(start, start + BLOCK)
        s = np.where(allowed[..., keys], scores[..., keys], -np.inf)
        new_top = np.maximum(top, s.max(axis=-1, keepdims=True))
        safe = np.where(np.isfinite(new_top), new_top, 0)
        exp = np.where(allowed[..., keys], np.exp(s - safe), 0)
        # the mistake: acc and total should first be scaled by exp(top - new_top)
        total = total + exp.sum(axis=-1, keepdims=True)
        acc = acc + exp @ v[..., keys, :]
        top = new_top
    out = acc / np.where(total == 0, 1, total)
    return project(merge(out), w_o)


# The variants (docs/variants.md): right, and with the mistakes of porting them


def grouped(H, H_kv):
    """Query head h reads KV head h // (H / H_kv): repeat_interleave."""
    return np.arange(H) // (H // H_kv)


def rotated(t, rotary, style=None):
    """(..., T, D): pair m of the first R features turned by position * base
    ** (-2m / R); NeoX pairs (m, m + R/2), GPT-J (2m, 2m + 1)."""
    T, D = t.shape[-2:]
    R = int(rotary.fraction * D)
    angle = np.arange(T)[:, None] * rotary.base ** (-np.arange(0, R, 2) / R)
    m = np.arange(R // 2)
    style = style or rotary.style
    a, b = (m, m + R // 2) if style == "neox" else (2 * m, 2 * m + 1)
    out = t.copy()
    out[..., a] = t[..., a] * np.cos(angle) - t[..., b] * np.sin(angle)
    out[..., b] = t[..., a] * np.sin(angle) + t[..., b] * np.cos(angle)
    return out


def windowed(T, mask, window, reach=0):
    """The causal mask, key j reaching query i iff i - j < window + reach."""
    allowed = allowed_of(T, mask)
    if window is None:
        return allowed
    i, j = np.arange(T)[:, None], np.arange(T)
    return allowed & (i - j < window + reach)


def capped_scores(q, k, softcap):
    scores = scores_of(q, k)
    return scores if softcap is None else softcap * np.tanh(scores / softcap)


def sink_softmax(scores, allowed, sinks):
    """softmax with each head's sink (H,) in the denominator."""
    if sinks is None:
        return softmax(scores, allowed)
    sink = sinks[:, None, None]  # (H, 1, 1)
    top = np.maximum(np.where(allowed, scores, -np.inf).max(-1, keepdims=True), sink)
    exp = np.where(allowed, np.exp(np.where(allowed, scores - top, 0)), 0)
    return exp / (exp.sum(axis=-1, keepdims=True) + np.exp(sink - top))


def variant_attention(
    x, w_q, w_k, w_v, w_o, n_heads, mask=None, *, n_kv_heads=None, rotary=None,
    window=None, softcap=None, alibi=False, sinks=None, q_norm=None, k_norm=None,
    **steps,
):  # fmt: skip
    """Right, with multi_head_attention's variant keywords: `steps` replace
    kv_heads, rotated, allowed_of, scores_of, softmax or weighted."""
    step = {
        "kv_heads": grouped,
        "rotated": rotated,
        "allowed_of": windowed,
        "scores_of": capped_scores,
        "softmax": sink_softmax,
        "weighted": weighted,
        **steps,
    }
    H = n_heads
    H_kv = n_kv_heads or H
    q = split(project(x, w_q), H)  # (..., H, T, D)
    k, v = (split(project(x, w), H_kv) for w in (w_k, w_v))  # (..., H_kv, T, D)
    if q_norm is not None:
        q, k = (
            t / np.sqrt((t * t).mean(-1, keepdims=True) + 1e-6) * weight
            for t, weight in ((q, q_norm), (k, k_norm))
        )
    if rotary is not None:
        q, k = step["rotated"](q, rotary), step["rotated"](k, rotary)
    group = step["kv_heads"](H, H_kv)
    k, v = k[..., group, :, :], v[..., group, :, :]  # (..., H, T, D)
    T = x.shape[-2]
    scores = step["scores_of"](q, k, softcap)
    if alibi:
        slopes = np.asarray(alibi_slopes(H))[:, None, None]
        scores = scores + slopes * (np.arange(T) - np.arange(T)[:, None])
    allowed = step["allowed_of"](T, mask, window)
    weights = step["softmax"](scores, allowed, sinks)
    out = merge(step["weighted"](weights, v, allowed))
    return project(out, w_o), weights


def window_one_key_too_many(x, w_q, w_k, w_v, w_o, n_heads, mask=None, **variant):
    """i - j <= W (attention-gym's q_idx - kv_idx <= window_size): W + 1 keys."""

    def allowed(T, mask, window):
        return windowed(T, mask, window, reach=1)

    return variant_attention(
        x, w_q, w_k, w_v, w_o, n_heads, mask, allowed_of=allowed, **variant
    )


def window_one_key_too_few(x, w_q, w_k, w_v, w_o, n_heads, mask=None, **variant):
    """i - j < W - 1 (FlashAttention's left size W - 1 read as exclusive)."""

    def allowed(T, mask, window):
        return windowed(T, mask, window, reach=-1)

    return variant_attention(
        x, w_q, w_k, w_v, w_o, n_heads, mask, allowed_of=allowed, **variant
    )


def rotary_style_swapped(x, w_q, w_k, w_v, w_o, n_heads, mask=None, **variant):
    """Pairs of the other style: a NeoX checkpoint turned as GPT-J's."""

    def other(t, rotary):
        return rotated(t, rotary, "gptj" if rotary.style == "neox" else "neox")

    return variant_attention(
        x, w_q, w_k, w_v, w_o, n_heads, mask, rotated=other, **variant
    )


def gqa_heads_tiled(x, w_q, w_k, w_v, w_o, n_heads, mask=None, **variant):
    """KV heads tiled (torch's Tensor.repeat): query head h reads h % H_kv."""
    return variant_attention(
        x, w_q, w_k, w_v, w_o, n_heads, mask,
        kv_heads=lambda H, H_kv: np.arange(H) % H_kv, **variant,
    )  # fmt: skip


def softcap_after_the_mask(x, w_q, w_k, w_v, w_o, n_heads, mask=None, **variant):
    """Masked to -inf, then capped: a masked score becomes -c, and weights @ v."""
    c = variant["softcap"]

    def masked_then_capped(scores, allowed, sinks):
        capped = c * np.tanh(np.where(allowed, scores, -np.inf) / c)
        return sink_softmax(capped, np.ones_like(allowed), sinks)

    return variant_attention(
        x, w_q, w_k, w_v, w_o, n_heads, mask,
        scores_of=lambda q, k, _: scores_of(q, k), softmax=masked_then_capped,
        weighted=lambda weights, v, _: weights @ v, **variant,
    )  # fmt: skip


def softcap_before_the_scale(x, w_q, w_k, w_v, w_o, n_heads, mask=None, **variant):
    """c tanh(q.k / c) / sqrt(D): the cap on the raw scores."""

    def capped(q, k, softcap):
        raw = q @ k.swapaxes(-1, -2)
        return softcap * np.tanh(raw / softcap) / math.sqrt(q.shape[-1])

    return variant_attention(
        x, w_q, w_k, w_v, w_o, n_heads, mask, scores_of=capped, **variant
    )


def endless_loop(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    while True:
        pass


def crashes(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    os.abort()


def raises(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    raise ValueError("not implemented yet")


def torch_attention(x, w_q, w_k, w_v, w_o, n_heads, mask=None, *, cut=""):
    """Right, in torch (imported here: NumPy-only runs never call it), with
    `cut` ("k", "q", "v" or "weights") detached from the graph; weights too."""
    import torch

    *B, T, C = x.shape
    q, k, v = (
        (x @ w).view(*B, T, n_heads, C // n_heads).transpose(-3, -2)
        for w in (w_q, w_k, w_v)
    )
    q, k, v = (
        t.detach() if cut == name else t
        for t, name in zip((q, k, v), "qkv", strict=True)
    )
    scores = q @ k.transpose(-1, -2) / math.sqrt(C // n_heads)
    allowed = torch.ones(T, T, dtype=torch.bool).tril()
    if mask is not None:
        allowed = allowed & mask
    weights = torch.softmax(scores.masked_fill(~allowed, -math.inf), dim=-1)
    weights = torch.nan_to_num(weights)  # a row of nothing: zeros
    if cut == "weights":
        weights = weights.detach()
    out = (weights @ v).transpose(-3, -2).reshape(*B, T, C)
    return out @ w_o, weights


def keys_detached(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """torch: the right numbers, but k.detach(): no gradient through the keys."""
    return torch_attention(x, w_q, w_k, w_v, w_o, n_heads, mask, cut="k")


def weights_detached(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """torch: the right numbers, but the softmax's output detached."""
    return torch_attention(x, w_q, w_k, w_v, w_o, n_heads, mask, cut="weights")


def doubled_value_gradient(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """torch: the right numbers, w_v's gradient doubled by a custom backward:
    nothing is cut from the graph, and at T = 1, where dW_q = dW_k = 0 is the
    truth, nothing may be said to be."""
    import torch

    class Doubled(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t.clone()

        @staticmethod
        def backward(ctx, grad):
            return 2 * grad

    return torch_attention(x, w_q, w_k, Doubled.apply(w_v), w_o, n_heads, mask)


def torch_no_scale(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """torch: scores not divided by sqrt(D) (q scaled up by it instead): the
    forward is wrong, so the gradients are too, and nothing is detached."""
    D = w_q.shape[-1] // n_heads
    return torch_attention(x, w_q * math.sqrt(D), w_k, w_v, w_o, n_heads, mask)


EXPECTED = {
    "transposed_weights": ("oracle:float64", "weights are transposed"),
    "no_scale": ("scale", "scale missing"),
    "scaled_by_d": ("scale", "divided by D instead of sqrt(D)"),
    "scaled_by_model_width": ("scale", "the model width"),
    "softmax_over_queries": ("rows sum to 1", "softmax over the query axis"),
    "inverted_mask": ("mask", "mask inverted"),
    "mask_replaces_causal": ("mask", "replaces the causal mask"),
    "off_by_one": ("causality", "future leaks at offset 1"),
    "no_causal_mask": ("causality", "no causal mask"),
    "max_not_subtracted": ("hostile magnitudes", "max not subtracted"),
    "heads_split_without_transpose": (
        "independence",
        "heads split without the transpose",
    ),
    "dropout_left_on": ("determinism", "dropout left on"),
    "mask_ignored": ("mask", "the given mask is ignored"),
    "causal_reversed": ("causality", "causal mask reversed"),
    "causal_inverted": ("causality", "causal mask inverted"),
    "denominator_leak": ("causality", "through the softmax's denominator"),
    "batch_flattened": ("independence", "batch items attend each other"),
    "mask_fill_minus_1e4": ("hostile magnitudes", "filled with -1e4"),
    "renormalised_after_masking": ("hostile magnitudes", "renormalised"),
    "blockwise_without_rescale": ("oracle:float64", "from row 16 on"),
}
"""Each broken version: the property that must FAIL (with the default
profile), and words of its diagnosis."""

ALSO = {
    "softmax_over_queries": ("causality", "softmax over the query axis"),
    "denominator_leak": ("rows sum to 1", "through the softmax's denominator"),
    "batch_flattened": ("causality", "batch items attend each other"),
    "mask_ignored": ("fully masked rows", "the given mask is ignored"),
    "inverted_mask": ("fully masked rows", "mask inverted"),
    "blockwise_without_rescale": ("oracle:float32", "from row 16 on"),
    "heads_split_without_transpose": ("causality", "heads split without the"),
    "transposed_weights": ("independence", "weights are transposed"),
}
"""A second property each of these must FAIL, with its own diagnosis (not
"no causal mask" for a mask that leaks another way, not a policy NOTE for a
mask that is ignored or inverted, not "future leaks at offset 3" for heads
split without the transpose: one mistake, one cause)."""

POLICIES = {
    "nan_for_fully_masked_rows": ("fully masked rows", "NaN from a fully masked row"),
    "nan_leaks_through_the_mask": ("NaN behind the mask", "0 * NaN = NaN"),
}
"""Policy differences: a NOTE with the default profile, a FAIL with strict."""

TORCH_EXPECTED = {
    "keys_detached": ("gradients", "the keys are cut from the graph"),
    "weights_detached": ("gradients", "the attention weights are cut from the graph"),
    "torch_no_scale": ("gradients", "the forward is already wrong"),
}
"""The torch versions (checked with --framework torch): the gradients row
and its diagnosis."""

VARIANT_EXPECTED = {
    "window_one_key_too_many": ({"window": 3}, "window", "W + 1 keys"),
    "window_one_key_too_few": ({"window": 3}, "oracle:float64", "W - 1 keys"),
    "rotary_style_swapped": (
        {"rotary": Rotary(style="neox")},
        "oracle:float64",
        "rotary positions in the other style",
    ),
    "gqa_heads_tiled": ({"n_kv_heads": 2}, "oracle:float64", "h % H_kv"),
    "softcap_after_the_mask": (
        {"softcap": 30.0},
        "soft-cap",
        "soft-cap after the mask",
    ),
    "softcap_before_the_scale": (
        {"softcap": 30.0},
        "oracle:float64",
        "soft-cap before the scale",
    ),
}
"""The mistakes of the variants: the options check is told (Variant's
fields), the property that must FAIL, and words of its diagnosis."""
