"""The variants of modern attention in NumPy, each a few lines (docs/variants.md).

Grouped-query attention, QK-norm, rotary positions, the sliding window,
soft-capping, ALiBi and sinks. attention.py, blockwise.py and kv_cache.py call
these only when a shared.Variant is given, so that plain attention reads as
before and computes bit for bit as before. impl_numpy, impl_torch and impl_jax hold
the same file: diff two to see the idioms.

Shape legend as in attention.py, and H_kv key/value heads, G = H / H_kv query
heads per KV head, R the features of a head that rotary positions turn,
Tq and Tk the query and key positions of a block of scores.
"""

from __future__ import annotations

import numpy as np

from shared.variants import inverse_frequencies, rotary_width

# Grouped-query attention (GQA; MQA when H_kv = 1)


def repeat_kv(t, G):
    """(..., H_kv, T, D) -> (..., H, T, D): each KV head serves G query heads
    in a row, so query head h reads KV head h // G."""
    return np.repeat(t, G, axis=-3)  # (..., H, T, D)


# Before the scores: QK-norm, then rotary positions (Qwen 3's order)


def normed_and_rotated(q, k, positions, variant):
    """q (..., H, T, D) and k (..., H_kv, T, D) through QK-norm and rotary
    positions, each if asked; positions broadcastable to (..., T)."""
    eps = variant.qk_norm_eps
    if variant.q_norm is not None:
        q = rms_norm(q, variant.q_norm.astype(q.dtype), eps)
    if variant.k_norm is not None:
        k = rms_norm(k, variant.k_norm.astype(k.dtype), eps)
    if variant.rotary is not None:
        positions = positions[..., None, :]  # (..., 1, T): every head alike
        q = rotate(q, positions, variant.rotary)
        k = rotate(k, positions, variant.rotary)
    return q, k


def rms_norm(t, weight, eps):
    """RMSNorm over the head width: t / sqrt(mean(t ** 2) + eps) * weight."""
    mean_square = (t * t).mean(axis=-1, keepdims=True)  # (..., T, 1)
    return t / np.sqrt(mean_square + eps) * weight  # (..., T, D)


def rotate(t, positions, rotary):
    """Rotary positions (RoPE): each pair of t's first R features turned by
    the angle position * base ** (-2m / R), m the pair's index; the others
    pass. t (..., T, D), positions broadcastable to (..., T)."""
    R = rotary_width(t.shape[-1], rotary.fraction)
    frequencies = inverse_frequencies(R, rotary.base).astype(t.dtype)  # (R/2,)
    angles = positions.astype(t.dtype)[..., None] * frequencies  # (..., T, R/2)
    cos, sin = np.cos(angles), np.sin(angles)
    if rotary.style == "neox":  # pair m is (m, m + R/2): rotate halves
        a, b = t[..., : R // 2], t[..., R // 2 : R]  # (..., T, R/2) each
    else:  # "gptj": pair m is (2m, 2m + 1), interleaved
        a, b = t[..., 0:R:2], t[..., 1:R:2]  # (..., T, R/2) each
    a, b = a * cos - b * sin, a * sin + b * cos  # each pair turned
    if rotary.style == "neox":
        turned = np.concatenate([a, b], axis=-1)  # (..., T, R)
    else:
        turned = np.stack([a, b], axis=-1).reshape(*a.shape[:-1], R)  # (..., T, R)
    return np.concatenate([turned, t[..., R:]], axis=-1)  # (..., T, D)


# Who may attend whom: the sliding window


def window_mask(query_positions, key_positions, window):
    """(Tq, Tk) bool: key j reaches query i iff i - W < j (transformers'
    convention); with the causal mask, the W keys up to i, i's own included."""
    return key_positions[None, :] > query_positions[:, None] - window


# On the scaled scores, before the mask: soft-capping, then ALiBi


def variant_scores(variant, H, query_positions, key_positions):
    """The variant on the scores of the queries and keys at these positions
    (Tq,) and (Tk,): the (Tq, Tk) keys each query reaches through the window
    (None: every key), and the score_mod (None: no soft-cap, no ALiBi)."""
    reach = None
    if variant.window is not None:
        reach = window_mask(query_positions, key_positions, variant.window)
    slopes = variant.slopes(H)
    if slopes is not None:  # (H,)
        slopes = np.asarray(slopes)
    score_mod = make_score_mod(variant.softcap, slopes, query_positions, key_positions)
    return reach, score_mod


def make_score_mod(softcap, slopes, query_positions, key_positions):
    """The function that soft-caps the scaled scores (..., Tq, Tk) and adds
    ALiBi's bias (slopes broadcastable to (...,)), as FlexAttention's
    score_mod does; None when neither is asked."""
    if softcap is None and slopes is None:
        return None

    def mod(scores):
        if softcap is not None:
            scores = soft_cap(scores, softcap)
        if slopes is not None:
            bias = alibi_bias(slopes, query_positions, key_positions)
            scores = scores + bias.astype(scores.dtype)
        return scores

    return mod


def soft_cap(scores, cap):
    """Soft-capping (Gemma 2): cap * tanh(scores / cap), about the scores
    where they are small, never beyond +-cap."""
    return cap * np.tanh(scores / cap)


def alibi_bias(slopes, query_positions, key_positions):
    """ALiBi: slope * (j - i) for query i and key j, (..., Tq, Tk): 0 on the
    diagonal, more negative the further back the key."""
    distance = key_positions[None, :] - query_positions[:, None]  # (Tq, Tk)
    return slopes[..., None, None] * distance  # (..., Tq, Tk)


# The softmax's denominator: sinks


def softmax_with_sinks(scores, sinks):
    """Softmax over the last axis with exp(sink) also in each row's
    denominator (gpt-oss), sinks broadcastable to (...,) of scores (..., Tq,
    Tk): a sink is a key with a logit and no value, so a row's weights sum to
    less than 1, and a row with nothing to attend gives zeros."""
    sink = sinks.astype(scores.dtype)[..., None, None]  # (..., 1, 1)
    row_max = np.maximum(scores.max(axis=-1, keepdims=True), sink)  # finite
    exp = np.exp(scores - row_max)  # masked entries: exp(-inf) = 0
    return exp / (exp.sum(axis=-1, keepdims=True) + np.exp(sink - row_max))


def sink_state(sinks, state):
    """The running (m, l, acc) of the online softmax started with the sink, a
    key of logit `sink` and no value: m = sink, l = exp(sink - m) = 1."""
    row_max, row_sum, acc = state
    start = np.broadcast_to(sinks.astype(row_max.dtype)[..., None], row_max.shape)
    return start.copy(), np.ones_like(row_sum), acc


# Blockwise attention: which blocks a window needs


def first_key_block(i, B, window):
    """The first key block that query block i reaches through a window of W
    keys (None: block 0): keys before i * B - W + 1 are out of every row's."""
    return 0 if window is None else max(0, (i * B - window + 1) // B)


def nonfinite_in_window(finite, window):
    """(..., T) bool: whether query i's window (i - W, i] holds a key whose
    value is not finite; finite (..., T) says which keys' values are."""
    count = np.cumsum(~finite, axis=-1)  # (..., T): non-finite keys up to j
    before = np.concatenate([np.zeros_like(count[..., :window]), count], axis=-1)
    return count - before[..., : count.shape[-1]] > 0  # (..., T)


# Decoding: a rolling cache of the window's W slots


def cache_slot(length, L, window):
    """Where position `length` is written: slot length % L in a rolling cache
    (a window of W <= L slots, decoding forever), slot `length` otherwise."""
    return length % L if window is not None and window <= L else length


def slot_positions(length, L):
    """(L,): the position each slot holds once position `length` is written,
    the latest p <= length with p % L = slot; negative where none is yet."""
    slots = np.arange(L)
    return length - (length - slots) % L  # (L,)
