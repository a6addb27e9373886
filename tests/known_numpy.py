"""Correct NumPy attention as a student might write it, for `triptych check`:
einsum all the way, and a softmax through log-sum-exp. Both take our
multi-head signature and return (out, weights).

tests/test_numpy_check.py checks them with a few examples;
tests/measure_known.py measures them with the defaults for docs/check.md.
"""

from __future__ import annotations

import math

import numpy as np


def causal_allowed(T, mask):
    allowed = np.tril(np.ones((T, T), dtype=bool))
    return allowed if mask is None else allowed & mask


def einsum_attention(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """x (..., T, C) -> out (..., T, C), weights (..., H, T, T), with einsum."""
    *B, T, C = x.shape
    D = C // n_heads
    q, k, v = (
        np.einsum("...tc,cd->...td", x, w).reshape(*B, T, n_heads, D)
        for w in (w_q, w_k, w_v)
    )
    scores = np.einsum("...qhd,...khd->...hqk", q, k) / math.sqrt(D)
    allowed = causal_allowed(T, mask)
    scores = np.where(allowed, scores, -np.inf)
    top = scores.max(axis=-1, keepdims=True)
    exp = np.exp(scores - np.where(np.isfinite(top), top, 0.0))
    total = exp.sum(axis=-1, keepdims=True)
    weights = exp / np.where(total == 0, 1.0, total)
    out = np.einsum("...hqk,...khd->...qhd", weights, v).reshape(*B, T, C)
    return np.einsum("...tc,cd->...td", out, w_o), weights


def log_sum_exp_attention(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """The softmax as exp(score - logsumexp(scores)); a row with nothing to
    attend gives zeros."""
    *B, T, C = x.shape
    D = C // n_heads

    def split(t):
        return t.reshape(*B, T, n_heads, D).swapaxes(-3, -2)

    q, k, v = (split(x @ w) for w in (w_q, w_k, w_v))
    scores = q @ k.swapaxes(-1, -2) / math.sqrt(D)
    allowed = np.broadcast_to(causal_allowed(T, mask), scores.shape)
    masked = np.where(allowed, scores, -np.inf)
    top = masked.max(axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        lse = top + np.log(np.exp(masked - top).sum(axis=-1, keepdims=True))
    weights = np.where(allowed, np.exp(masked - np.where(np.isfinite(lse), lse, 0)), 0)
    out = (weights @ v).swapaxes(-3, -2).reshape(*B, T, C)
    return out @ w_o, weights
