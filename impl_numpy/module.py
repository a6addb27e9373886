"""The module form in NumPy: a plain class that holds the four projections.

NumPy has no module system, so this is the functional form with its parameters
kept on an object, called like the torch and flax modules: `module(x)` returns
`(out, weights)`.
"""

from __future__ import annotations

import numpy as np

from impl_numpy import attention, kv_cache
from shared.validation import check_heads


class CausalSelfAttention:
    """Multi-head causal self-attention with weights in the (in, out) layout.

    Attributes:
        w_q, w_k, w_v, w_o: (C, C) projections.
        n_heads: H.
        scale: divide scores by sqrt(D).
    """

    def __init__(self, d_model, n_heads, *, scale=True, seed=0, dtype=np.float32):
        """Random N(0, 1/C) weights from `numpy.random.default_rng(seed)`."""
        self.n_heads = check_heads(d_model, n_heads)
        self.scale = scale
        rng = np.random.default_rng(seed)
        shape = (d_model, d_model)
        self.w_q, self.w_k, self.w_v, self.w_o = (
            (rng.standard_normal(shape) / np.sqrt(d_model)).astype(dtype)
            for _ in range(4)
        )

    @classmethod
    def from_weights(cls, w_q, w_k, w_v, w_o, n_heads, *, scale=True):
        """A module holding copies of the given (C, C) NumPy projections."""
        module = cls(w_q.shape[0], n_heads, scale=scale, dtype=w_q.dtype)
        module.w_q, module.w_k, module.w_v, module.w_o = (
            np.array(w) for w in (w_q, w_k, w_v, w_o)
        )
        return module

    def __call__(self, x, mask=None):
        """x (..., T, C) -> out (..., T, C), weights (..., H, T, T)."""
        return attention.multi_head_attention(
            x, *self.projections(), self.n_heads, mask, scale=self.scale
        )

    def projections(self):
        """w_q, w_k, w_v, w_o (C, C), in our (in, out) layout."""
        return self.w_q, self.w_k, self.w_v, self.w_o

    def init_cache(self, batch, max_len):
        """An empty KVCache for decoding up to `max_len` tokens (kv_cache.py).

        batch: the leading axes of x, e.g. () for one sequence.
        """
        return kv_cache.init_kv_cache(
            batch, max_len, self.w_q.shape[0], self.n_heads, self.w_q.dtype.name
        )

    def decode_step(self, x_t, cache):
        """x_t (..., C), cache -> out_t (..., C), the cache with x_t in it."""
        return kv_cache.decode_step(
            x_t, cache, *self.projections(), self.n_heads, scale=self.scale
        )
