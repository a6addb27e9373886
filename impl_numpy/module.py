"""The module form in NumPy: a plain class that holds the four projections.

NumPy has no module system, so this is the functional form with its parameters
kept on an object, called like the torch and flax modules: `module(x)` returns
`(out, weights)`.
"""

from __future__ import annotations

import numpy as np

from impl_numpy import attention, kv_cache
from shared.convert import params_from
from shared.validation import check_heads, check_numpy_weights


class CausalSelfAttention:
    """Multi-head causal self-attention with weights in the (in, out) layout.

    Attributes:
        w_q, w_k, w_v, w_o: (C, C) projections.
        b_q, b_k, b_v, b_o: (C,) biases, or None (a module built without them).
        n_heads: H.
        scale: divide scores by sqrt(D).
    """

    def __init__(
        self, d_model, n_heads, *, bias=False, scale=True, seed=0, dtype=np.float32
    ):
        """Random N(0, 1/C) weights from `numpy.random.default_rng(seed)`; zero
        biases if `bias`."""
        self.n_heads = check_heads(d_model, n_heads)
        self.scale = scale
        rng = np.random.default_rng(seed)
        shape = (d_model, d_model)
        self.w_q, self.w_k, self.w_v, self.w_o = (
            (rng.standard_normal(shape) / np.sqrt(d_model)).astype(dtype)
            for _ in range(4)
        )
        b = np.zeros(d_model, dtype) if bias else None
        self.b_q, self.b_k, self.b_v, self.b_o = (
            None if b is None else b.copy() for _ in range(4)
        )

    @classmethod
    def from_weights(
        cls,
        w_q,
        w_k,
        w_v,
        w_o,
        n_heads,
        *,
        scale=True,
        b_q=None,
        b_k=None,
        b_v=None,
        b_o=None,
    ):
        """A module holding copies of (C, C) NumPy projections in the (in, out)
        layout and of the (C,) biases given (zeros for the others if any is)."""
        given = check_numpy_weights(
            w_q=w_q, w_k=w_k, w_v=w_v, w_o=w_o, b_q=b_q, b_k=b_k, b_v=b_v, b_o=b_o
        )
        bias = any(name.startswith("b_") for name in given)
        module = cls(w_q.shape[0], n_heads, bias=bias, scale=scale, dtype=w_q.dtype)
        for name, array in given.items():
            setattr(module, name, np.array(array))
        return module

    @classmethod
    def from_layer(cls, layer):
        """A module with the parameters of another library's attention layer
        (shared.convert.params_from says which), in the layer's dtype."""
        p = params_from(layer)
        return cls.from_weights(
            *p.weights_as(p.dtype), p.n_heads, scale=p.scale, **p.biases_as(p.dtype)
        )

    def __call__(self, x, mask=None):
        """x (..., T, C) -> out (..., T, C), weights (..., H, T, T)."""
        return attention.multi_head_attention(
            x,
            *self.projections(),
            self.n_heads,
            mask,
            scale=self.scale,
            **self.biases(),
        )

    def projections(self):
        """w_q, w_k, w_v, w_o (C, C), in our (in, out) layout."""
        return self.w_q, self.w_k, self.w_v, self.w_o

    def biases(self):
        """b_q, b_k, b_v, b_o by name: (C,) each, or None."""
        return {"b_q": self.b_q, "b_k": self.b_k, "b_v": self.b_v, "b_o": self.b_o}

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
            x_t,
            cache,
            *self.projections(),
            self.n_heads,
            scale=self.scale,
            **self.biases(),
        )
