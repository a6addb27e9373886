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
# # variants.py: GQA, rotary positions, windows, caps, sinks, in NumPy
#
# The variants of modern attention in NumPy, each a few lines (docs/variants.md).
#
# Grouped-query attention, QK-norm, rotary positions, the sliding window,
# soft-capping, ALiBi and sinks. attention.py, blockwise.py and kv_cache.py call
# these only when a shared.Variant is given, so that plain attention reads as
# before and computes bit for bit as before. impl_numpy, impl_torch and impl_jax hold
# the same file: diff two to see the idioms.
#
# Shape legend as in attention.py, and H_kv key/value heads, G = H / H_kv query
# heads per KV head, R the features of a head that rotary positions turn,
# Tq and Tk the query and key positions of a block of scores.
#
# The first code cell installs the project where it is missing (in Colab). The
# functions are `impl_numpy/variants.py`'s, as the page shows them: edit one and
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

from shared.variants import inverse_frequencies, rotary_width

# %%
def repeat_kv(t, G):
    """(..., H_kv, T, D) -> (..., H, T, D): each KV head serves G query heads
    in a row, so query head h reads KV head h // G."""
    return np.repeat(t, G, axis=-3)  # (..., H, T, D)

# %%
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

# %%
def rms_norm(t, weight, eps):
    """RMSNorm over the head width: t / sqrt(mean(t ** 2) + eps) * weight."""
    mean_square = (t * t).mean(axis=-1, keepdims=True)  # (..., T, 1)
    return t / np.sqrt(mean_square + eps) * weight  # (..., T, D)

# %%
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

# %%
def window_mask(query_positions, key_positions, window):
    """(Tq, Tk) bool: key j reaches query i iff i - W < j (transformers'
    convention); with the causal mask, the W keys up to i, i's own included."""
    return key_positions[None, :] > query_positions[:, None] - window

# %%
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

# %%
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

# %%
def soft_cap(scores, cap):
    """Soft-capping (Gemma 2): cap * tanh(scores / cap), about the scores
    where they are small, never beyond +-cap."""
    return cap * np.tanh(scores / cap)

# %%
def alibi_bias(slopes, query_positions, key_positions):
    """ALiBi: slope * (j - i) for query i and key j, (..., Tq, Tk): 0 on the
    diagonal, more negative the further back the key."""
    distance = key_positions[None, :] - query_positions[:, None]  # (Tq, Tk)
    return slopes[..., None, None] * distance  # (..., Tq, Tk)

# %%
def softmax_with_sinks(scores, sinks):
    """Softmax over the last axis with exp(sink) also in each row's
    denominator (gpt-oss), sinks broadcastable to (...,) of scores (..., Tq,
    Tk): a sink is a key with a logit and no value, so a row's weights sum to
    less than 1, and a row with nothing to attend gives zeros."""
    sink = sinks.astype(scores.dtype)[..., None, None]  # (..., 1, 1)
    row_max = np.maximum(scores.max(axis=-1, keepdims=True), sink)  # finite
    exp = np.exp(scores - row_max)  # masked entries: exp(-inf) = 0
    return exp / (exp.sum(axis=-1, keepdims=True) + np.exp(sink - row_max))

# %%
def sink_state(sinks, state):
    """The running (m, l, acc) of the online softmax started with the sink, a
    key of logit `sink` and no value: m = sink, l = exp(sink - m) = 1."""
    row_max, row_sum, acc = state
    start = np.broadcast_to(sinks.astype(row_max.dtype)[..., None], row_max.shape)
    return start.copy(), np.ones_like(row_sum), acc

# %%
def first_key_block(i, B, window):
    """The first key block that query block i reaches through a window of W
    keys (None: block 0): keys before i * B - W + 1 are out of every row's."""
    return 0 if window is None else max(0, (i * B - window + 1) // B)

# %%
def nonfinite_in_window(finite, window):
    """(..., T) bool: whether query i's window (i - W, i] holds a key whose
    value is not finite; finite (..., T) says which keys' values are."""
    count = np.cumsum(~finite, axis=-1)  # (..., T): non-finite keys up to j
    before = np.concatenate([np.zeros_like(count[..., :window]), count], axis=-1)
    return count - before[..., : count.shape[-1]] > 0  # (..., T)

# %%
def cache_slot(length, L, window):
    """Where position `length` is written: slot length % L in a rolling cache
    (a window of W <= L slots, decoding forever), slot `length` otherwise."""
    return length % L if window is not None and window <= L else length

# %%
def slot_positions(length, L):
    """(L,): the position each slot holds once position `length` is written,
    the latest p <= length with p % L = slot; negative where none is yet."""
    slots = np.arange(L)
    return length - (length - slots) % L  # (L,)

# %% [markdown]
# ## Against the float64 oracle, in float32

# %%
from impl_numpy.arrays import from_numpy, to_numpy
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
from impl_numpy.attention import (
    allowed_keys, attend, merge_heads, project, split_heads,
)
from shared.variants import Rotary, Variant


def attention_with_variant(x, w_q, w_k, w_v, w_o, positions, n_heads, variant):
    """attention.py's multi-head path (multi_head around attend_heads),
    calling the variant functions above, this notebook's: out (B, T, C)."""
    G = variant.groups(n_heads)  # query heads per KV head
    q = split_heads(project(x, w_q), n_heads)  # (B, H, T, D)
    k = split_heads(project(x, w_k), n_heads // G)  # (B, H_kv, T, D)
    v = split_heads(project(x, w_v), n_heads // G)  # (B, H_kv, T, D)
    q, k = normed_and_rotated(q, k, positions, variant)  # rotary positions
    k, v = repeat_kv(k, G), repeat_kv(v, G)  # (B, H, T, D): GQA
    # the keys each query reaches through the window; soft-cap and ALiBi
    reach, score_mod = variant_scores(variant, n_heads, positions, positions)
    allowed = allowed_keys(x.shape[-2]) & reach  # (T, T)
    out, _ = attend(q, k, v, allowed, True, score_mod)  # steps 3 to 7
    return project(merge_heads(out), w_o)  # (B, T, C)


# four query heads of width D = 2 share two KV heads (GQA: w_k and w_v are
# (C, H_kv * D)); q and k turned by rotary positions; each query reaches the
# 3 keys up to it (a sliding window); the scaled scores soft-capped at 2, then
# ALiBi's bias added
variant = Variant(
    n_kv_heads=2, rotary=Rotary(), window=3, softcap=2.0, alibi=True
)
w_kv = [a[:, :4] for a in w[1:3]]  # (C, H_kv * D)
positions = from_numpy(np.arange(6))  # (T,): the queries' and keys' positions
# run as written, one operation at a time
attention = attention_with_variant
out = attention(*map(f32, (x, w[0], *w_kv, w[3])), positions, 4, variant)
expected, _ = reference_multi_head(x, w[0], *w_kv, w[3], 4, variant=variant)
distance = np.abs(f64(out) - expected).max()
what = "GQA, rotary, window, soft-cap, ALiBi"
print(f"{what}: max |out - oracle| = {distance:.2e}")
assert np.allclose(f64(out), expected, atol=ATOL, rtol=RTOL)

# %% [markdown]
# Try it: in `window_mask` write `>=` for `>`, rerun: each query reaches W + 1
# keys, one more than the oracle's W. Sinks and QK-norm, and the functions for
# blockwise attention and the rolling cache, are run by the library's attention,
# blockwise.py and kv_cache.py; docs/variants.md says what each variant is.
