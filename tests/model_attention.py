"""Attention written as today's model libraries write it, right and with one
real person's bug each, for `triptych check` (tests/test_numpy_check_models.py):
the styles of transformers' Llama / GPT-NeoX (rotate_half over the first
rotary_dim features) and GPT-J (interleaved pairs), llm-foundry's ALiBi
(slopes computed in float32), ALiBi as its paper and BLOOM write it with
each of its bugs (ALIBI_EXPECTED), a windowed attention with a key-padding mask,
a q, k, v kernel returning (B, H, T, D), and single-head homework. Written
for these tests, NumPy only (so `tox -e numpy` runs them), each in a few
lines as their authors write them.
"""

from __future__ import annotations

import math

import numpy as np


def heads_of(t, H):
    *B, T, C = t.shape
    return t.reshape(*B, T, H, C // H).swapaxes(-3, -2)  # (..., H, T, D)


def merged(t):
    *B, H, T, D = t.shape
    return t.swapaxes(-3, -2).reshape(*B, T, H * D)  # (..., T, C)


def masked_softmax(scores, allowed, empty=0.0):
    """softmax over keys; a row with nothing allowed gives `empty` (0: zeros,
    NaN: 0 / 0 as a -inf fill gives)."""
    scores = np.where(allowed, scores, -np.inf)
    top = scores.max(-1, keepdims=True)
    exp = np.exp(scores - np.where(np.isfinite(top), top, 0))
    total = exp.sum(-1, keepdims=True)
    weights = exp / np.where(total == 0, 1, total)
    return np.where(allowed.any(-1, keepdims=True), weights, empty)


def causal(T, window=None):
    i, j = np.arange(T)[:, None], np.arange(T)
    allowed = j <= i
    return allowed if window is None else allowed & (i - j < window)


# Rotary positions: transformers' Llama / GPT-NeoX and GPT-J -------------------


def rotate_half(t):
    half = t.shape[-1] // 2
    return np.concatenate([-t[..., half:], t[..., :half]], axis=-1)


def rotate_every_two(t):
    out = np.empty_like(t)
    out[..., 0::2], out[..., 1::2] = -t[..., 1::2], t[..., 0::2]
    return out


def rope(t, rotary, style):
    """The first rotary_dim = int(fraction * D) features turned, the rest
    passed through (GPT-NeoX's rotary_pct, GPT-J's rotary_dim)."""
    T, D = t.shape[-2:]
    R = int(rotary.fraction * D)
    inv_freq = 1.0 / rotary.base ** (np.arange(0, R, 2) / R)  # (R/2,)
    freqs = np.arange(T)[:, None] * inv_freq  # (T, R/2)
    if style == "neox":  # cos, sin over [freqs, freqs]
        angles = np.concatenate([freqs, freqs], axis=-1)
        turn = rotate_half
    else:  # GPT-J: each frequency twice, side by side
        angles = np.repeat(freqs, 2, axis=-1)
        turn = rotate_every_two
    part, rest = t[..., :R], t[..., R:]
    part = part * np.cos(angles) + turn(part) * np.sin(angles)
    return np.concatenate([part, rest], axis=-1)


def rotary_model(x, w_q, w_k, w_v, w_o, n_heads, mask=None, *, rotary=None,
                 style=None):  # fmt: skip
    """Llama / GPT-NeoX / GPT-J attention with rotary positions; `style`
    overrides the one check is told (the bug: GPT-J rotating halves)."""
    q, k, v = (heads_of(x @ w, n_heads) for w in (w_q, w_k, w_v))
    q, k = (rope(t, rotary, style or rotary.style) for t in (q, k))
    T, D = x.shape[-2], q.shape[-1]
    allowed = causal(T) if mask is None else causal(T) & mask
    scores = q @ k.swapaxes(-1, -2) / math.sqrt(D)
    weights = masked_softmax(scores, allowed)
    return merged(weights @ v) @ w_o, weights


def rotary_right(x, w_q, w_k, w_v, w_o, n_heads, mask=None, *, rotary=None):
    return rotary_model(x, w_q, w_k, w_v, w_o, n_heads, mask, rotary=rotary)


def gptj_rotating_halves(x, w_q, w_k, w_v, w_o, n_heads, mask=None, *, rotary=None):
    """GPT-J ported with Llama's rotate_half: right where a head has one pair."""
    return rotary_model(
        x, w_q, w_k, w_v, w_o, n_heads, mask, rotary=rotary, style="neox"
    )


# ALiBi: llm-foundry's slopes ---------------------------------------------------


def foundry_slopes(H, float32=True, interleave=True):
    """llm-foundry's gen_slopes: 1 / 2 ** (8 / n * m) for the next power of
    two n, and for H not a power of two every other slope of 2n (the
    interleaved half), computed in float32 as it does."""
    n = 2 ** math.ceil(math.log2(H))
    dtype = np.float32 if float32 else np.float64
    m = np.arange(1, n + 1, dtype=dtype) * dtype(8 / n)
    slopes = 1.0 / np.power(dtype(2), m)
    if n != H:
        slopes = (
            np.concatenate([slopes[1::2], slopes[::2]])[:H]
            if interleave
            else (slopes[:H])
        )
    return slopes.astype(np.float64)


def alibi_model(x, w_q, w_k, w_v, w_o, n_heads, mask=None, *, alibi=False,
                n_kv_heads=None, float32=True, interleave=True,
                empty=0.0):  # fmt: skip
    H_kv = n_kv_heads or n_heads
    q = heads_of(x @ w_q, n_heads)
    k, v = (heads_of(x @ w, H_kv) for w in (w_k, w_v))
    k, v = (np.repeat(t, n_heads // H_kv, axis=-3) for t in (k, v))  # repeat_kv
    T, D = x.shape[-2], q.shape[-1]
    slopes = foundry_slopes(n_heads, float32, interleave)[:, None, None]
    bias = slopes * (np.arange(T) - np.arange(T)[:, None])  # (H, T, T)
    scores = q @ k.swapaxes(-1, -2) / math.sqrt(D) + bias
    allowed = causal(T) if mask is None else causal(T) & mask
    weights = masked_softmax(scores, allowed, empty)
    return merged(weights @ v) @ w_o, weights


def alibi_foundry(x, w_q, w_k, w_v, w_o, n_heads, mask=None, *, alibi=False,
                  n_kv_heads=None):  # fmt: skip
    """Right, its slopes float32: exact powers of two up to H = 8, 1e-8 off
    the float64 slopes at H = 12 (2 ** -0.5 m)."""
    return alibi_model(x, w_q, w_k, w_v, w_o, n_heads, mask, n_kv_heads=n_kv_heads)


def alibi_power_of_two_only(x, w_q, w_k, w_v, w_o, n_heads, mask=None, *,
                            alibi=False):  # fmt: skip
    """The first H slopes of the next power of two: right for H = 1, 2, 4."""
    return alibi_model(x, w_q, w_k, w_v, w_o, n_heads, mask, interleave=False)


def alibi_uniform_rows(x, w_q, w_k, w_v, w_o, n_heads, mask=None, *, alibi=False):
    """A fully masked row filled with the mean over all T keys (a large
    negative fill, the bias added before the mask), in float64 slopes."""
    q, k, v = (heads_of(x @ w, n_heads) for w in (w_q, w_k, w_v))
    T, D = x.shape[-2], q.shape[-1]
    slopes = foundry_slopes(n_heads, float32=False)[:, None, None]
    scores = q @ k.swapaxes(-1, -2) / math.sqrt(D)
    scores = scores + slopes * (np.arange(T) - np.arange(T)[:, None])
    allowed = causal(T) if mask is None else causal(T) & mask
    scores = np.where(allowed, scores, np.finfo(np.float64).min)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    # transformers-style: a row with nothing to attend is every key equally
    weights = np.where(allowed.any(-1, keepdims=True), weights, 1.0 / T)
    return merged(weights @ v) @ w_o, weights


# ALiBi as the paper writes it (Press et al.'s get_slopes), and its bugs -------------


def paper_slopes(n):
    """Press et al.'s get_slopes: start * start ** i for a power of two;
    else the closest power of two's slopes, then every other slope of twice
    it (the interleaved half)."""

    def of_power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return of_power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return of_power_of_2(closest) + paper_slopes(2 * closest)[0::2][: n - closest]


def key_positions(T):
    return np.arange(T)  # (T,) BLOOM's bias: -slope * i is the same in a row


def alibi_paper(x, w_q, w_k, w_v, w_o, n_heads, mask=None, *, alibi=False,
                slopes_of=paper_slopes, distance=key_positions,
                before_scale=False):  # fmt: skip
    """Right: BLOOM's bias slope_h * j, which the softmax sees as slope_h
    (j - i). The keywords are the bugs of the broken copies below."""
    q, k, v = (heads_of(x @ w, n_heads) for w in (w_q, w_k, w_v))
    T, D = x.shape[-2], q.shape[-1]
    slopes = np.asarray(slopes_of(n_heads))[:, None, None]  # (H, 1, 1)
    bias = slopes * distance(T)  # (H, 1 or T, T)
    scores = q @ k.swapaxes(-1, -2)
    if before_scale:
        scores = (scores + bias) / math.sqrt(D)
    else:
        scores = scores / math.sqrt(D) + bias
    allowed = causal(T) if mask is None else causal(T) & mask
    weights = masked_softmax(scores, allowed)
    return merged(weights @ v) @ w_o, weights


def alibi_sign_flipped(x, w_q, w_k, w_v, w_o, n_heads, mask=None, *, alibi=False):
    """The distance taken as query - key: slope_h (i - j)."""
    return alibi_paper(x, w_q, w_k, w_v, w_o, n_heads, mask,
                       distance=lambda T: np.arange(T)[:, None] - np.arange(T))  # fmt: skip


def alibi_slopes_reversed(x, w_q, w_k, w_v, w_o, n_heads, mask=None, *,
                          alibi=False):  # fmt: skip
    """The slopes flipped: head 0 the gentlest."""
    return alibi_paper(x, w_q, w_k, w_v, w_o, n_heads, mask,
                       slopes_of=lambda n: paper_slopes(n)[::-1])  # fmt: skip


def alibi_slopes_from_zero(x, w_q, w_k, w_v, w_o, n_heads, mask=None, *,
                           alibi=False):  # fmt: skip
    """2 ** (-8 h / H) over arange(H): the first slope 1."""
    return alibi_paper(x, w_q, w_k, w_v, w_o, n_heads, mask,
                       slopes_of=lambda n: 2.0 ** (-8.0 * np.arange(n) / n))  # fmt: skip


def geometric_float32(n):
    """2 ** (-8 (h + 1) / H) for every H, in float32 as torch computes it."""
    return 2.0 ** (-8 * np.arange(1, n + 1, dtype=np.float32) / np.float32(n))


def alibi_slopes_geometric(x, w_q, w_k, w_v, w_o, n_heads, mask=None, *,
                           alibi=False):  # fmt: skip
    """The powers-of-two rule at every head count, float32 slopes."""
    return alibi_paper(x, w_q, w_k, w_v, w_o, n_heads, mask,
                       slopes_of=geometric_float32)  # fmt: skip


def alibi_interleaved_from_the_second(x, w_q, w_k, w_v, w_o, n_heads, mask=None,
                                      *, alibi=False):  # fmt: skip
    """get_slopes' [0::2] typed [1::2]: the heads past the power of two
    repeat its slopes."""

    def slopes(n):
        closest = 2 ** math.floor(math.log2(n))
        extra = paper_slopes(2 * closest)[1::2][: n - closest]
        return paper_slopes(closest) + extra

    return alibi_paper(x, w_q, w_k, w_v, w_o, n_heads, mask, slopes_of=slopes)


def alibi_before_the_scale(x, w_q, w_k, w_v, w_o, n_heads, mask=None, *,
                           alibi=False):  # fmt: skip
    """(q.k + bias) / sqrt(D): the bias scaled down with the scores."""
    return alibi_paper(x, w_q, w_k, w_v, w_o, n_heads, mask, before_scale=True)


def alibi_on_query_positions(x, w_q, w_k, w_v, w_o, n_heads, mask=None, *,
                             alibi=False):  # fmt: skip
    """BLOOM's bias on the wrong axis, slope_h * i, (T, 1) for (1, T): every
    key of a row shares it, and the softmax cancels it."""
    return alibi_paper(x, w_q, w_k, w_v, w_o, n_heads, mask,
                       distance=lambda T: np.arange(T)[:, None])  # fmt: skip


def alibi_slopes_doubled(x, w_q, w_k, w_v, w_o, n_heads, mask=None, *,
                         alibi=False):  # fmt: skip
    """Every slope twice the paper's: a bug no known mistake is."""
    return alibi_paper(x, w_q, w_k, w_v, w_o, n_heads, mask,
                       slopes_of=lambda n: 2 * np.asarray(paper_slopes(n)))  # fmt: skip


ALIBI_EXPECTED = {
    "alibi_sign_flipped": "the wrong sign",
    "alibi_slopes_reversed": "reverse head order",
    "alibi_slopes_from_zero": "a first slope of 1",
    "alibi_slopes_geometric": "that rule is for powers of two",
    "alibi_power_of_two_only": "the first H slopes of the next power of two",
    "alibi_interleaved_from_the_second": "repeat P's own",
    "alibi_before_the_scale": "added before the scale",
    "alibi_on_query_positions": "ALiBi's bias is missing",
}
"""Each ALiBi bug (checked with --alibi): words of the diagnosis its
oracle:float64 row must give."""


# A sliding window with a key-padding mask ----------------------------------------


def windowed_padded(x, w_q, w_k, w_v, w_o, n_heads, mask=None, *, window=None):
    """A plain windowed attention: -inf fill, so a row the window and the
    padding leave empty is NaN (0 / 0)."""
    q, k, v = (heads_of(x @ w, n_heads) for w in (w_q, w_k, w_v))
    T, D = x.shape[-2], q.shape[-1]
    allowed = causal(T, window) if mask is None else causal(T, window) & mask
    scores = np.where(allowed, q @ k.swapaxes(-1, -2) / math.sqrt(D), -np.inf)
    exp = np.exp(scores - scores.max(-1, keepdims=True))
    weights = exp / exp.sum(-1, keepdims=True)
    return merged(weights @ v) @ w_o, weights


# A q, k, v kernel returning (B, H, T, D) ----------------------------------------


def kernel_leaking_two(q, k, v):
    """A kernel whose causal mask reaches two keys ahead (tril(k=2))."""
    T, D = q.shape[-2:]
    allowed = np.tril(np.ones((T, T), dtype=bool), k=2)
    weights = masked_softmax(q @ k.swapaxes(-1, -2) / math.sqrt(D), allowed)
    return weights @ v  # (B, H, T, D)


def kernel_raising_on_six(q, k, v):
    """The same, and it refuses T = 6 (the rich problem's length)."""
    if q.shape[-2] == 6:
        raise ValueError("sequence length 6 is not supported by this kernel")
    return kernel_leaking_two(q, k, v)


# Single head: the homework form --------------------------------------------------


def single_scaled_by_model_width(x, w_q, w_k, w_v, mask=None):
    """Divides by sqrt(C), the width of x, where sqrt(D) belongs."""
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    T = x.shape[-2]
    allowed = causal(T) if mask is None else causal(T) & mask
    scores = q @ k.swapaxes(-1, -2) / math.sqrt(x.shape[-1])
    weights = masked_softmax(scores, allowed)
    return weights @ v, weights


def single_right(x, w_q, w_k, w_v, mask=None):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    T = x.shape[-2]
    allowed = causal(T) if mask is None else causal(T) & mask
    scores = q @ k.swapaxes(-1, -2) / math.sqrt(q.shape[-1])
    weights = masked_softmax(scores, allowed)
    return weights @ v, weights


# Softmax mistakes that only large scores show --------------------------------------


def exp_of(scores, allowed, shift):
    """softmax with `shift` subtracted before exp, the mask added as a float64
    bias (0 or -inf), as a user writes np.where(mask, 0.0, -np.inf)."""
    bias = np.where(allowed, 0.0, -np.inf)  # float64: promotes what it touches
    scores = scores + bias
    exp = np.exp(scores - shift(scores))
    return exp / exp.sum(-1, keepdims=True)


def softmax_step(x, w_q, w_k, w_v, w_o, n_heads, mask, shift):
    q, k, v = (heads_of(x @ w, n_heads) for w in (w_q, w_k, w_v))
    T, D = x.shape[-2], q.shape[-1]
    allowed = causal(T) if mask is None else causal(T) & mask
    weights = exp_of(q @ k.swapaxes(-1, -2) / np.sqrt(D).astype(x.dtype), allowed,
                     shift).astype(x.dtype)  # fmt: skip
    return merged(weights @ v) @ w_o, weights


def no_max_float64_mask(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """exp(scores) with no max subtracted; the float64 bias makes it float64."""
    return softmax_step(x, w_q, w_k, w_v, w_o, n_heads, mask, lambda z: 0.0)


def global_max(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """z - z.max(): one max for every row of every head."""
    return softmax_step(x, w_q, w_k, w_v, w_o, n_heads, mask, lambda z: z.max())


def dropout_on(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """nn.Dropout(0.1) on the weights, left in training mode."""
    q, k, v = (heads_of(x @ w, n_heads) for w in (w_q, w_k, w_v))
    T, D = x.shape[-2], q.shape[-1]
    allowed = causal(T) if mask is None else causal(T) & mask
    weights = masked_softmax(q @ k.swapaxes(-1, -2) / math.sqrt(D), allowed)
    keep = np.random.default_rng().random(weights.shape) >= 0.1
    weights = np.where(keep, weights / 0.9, 0.0)
    return merged(weights @ v) @ w_o, weights


def single_k_t_promised(x, w_q, w_k, w_v, mask=None):
    """x (..., T, C); w_q, w_k, w_v (C, D) -> out (..., T, D): k.T where k.mT
    belongs, right on (T, C) only."""
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    allowed = causal(x.shape[-2]) if mask is None else causal(x.shape[-2]) & mask
    weights = masked_softmax(q @ k.T / math.sqrt(q.shape[-1]), allowed)
    return weights @ v, weights


def single_k_t(x, w_q, w_k, w_v, mask=None):
    return single_k_t_promised(x, w_q, w_k, w_v, mask)
