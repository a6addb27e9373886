"""The module form in JAX: a flax `nnx.Module` built on four `nnx.Linear` layers.

`nnx.Linear.kernel` has our (in, out) layout already, so `from_weights` copies
the numbers as they are (through `shared.layout.to_flax_linear`, named so that
the mapping is visible). Run it eagerly, or under `nnx.jit`.
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx

from impl_jax import kv_cache
from impl_jax.attention import _attend, _merge_heads, _split_heads
from shared.layout import to_flax_linear
from shared.validation import check_heads, check_multi_head


class CausalSelfAttention(nnx.Module):
    """Multi-head causal self-attention.

    Attributes:
        q_proj, k_proj, v_proj, out_proj: nnx.Linear(C, C, use_bias=False).
        n_heads: H.
        scale: divide scores by sqrt(D).
    """

    def __init__(self, d_model, n_heads, *, scale=True, param_dtype=jnp.float32, rngs):
        self.n_heads = check_heads(d_model, n_heads)
        self.scale = scale
        kwargs = dict(use_bias=False, param_dtype=param_dtype, rngs=rngs)
        self.q_proj = nnx.Linear(d_model, d_model, **kwargs)
        self.k_proj = nnx.Linear(d_model, d_model, **kwargs)
        self.v_proj = nnx.Linear(d_model, d_model, **kwargs)
        self.out_proj = nnx.Linear(d_model, d_model, **kwargs)

    @classmethod
    def from_weights(cls, w_q, w_k, w_v, w_o, n_heads, *, scale=True):
        """A module loaded with (C, C) NumPy projections in the (in, out) layout."""
        module = cls(
            w_q.shape[0], n_heads, scale=scale, param_dtype=w_q.dtype, rngs=nnx.Rngs(0)
        )
        linears = (module.q_proj, module.k_proj, module.v_proj, module.out_proj)
        for linear, w in zip(linears, (w_q, w_k, w_v, w_o), strict=True):
            linear.kernel[...] = jnp.asarray(to_flax_linear(w))
        return module

    def __call__(self, x, mask=None):
        """x (..., T, C) -> out (..., T, C), weights (..., H, T, T)."""
        linears = (self.q_proj, self.k_proj, self.v_proj, self.out_proj)
        check_multi_head(x, *(linear.kernel for linear in linears), self.n_heads, mask)
        # 1. project x into queries, keys and values
        q = self.q_proj(x)  # (..., T, C) @ (C, C) -> (..., T, C)
        k = self.k_proj(x)  # (..., T, C) @ (C, C) -> (..., T, C)
        v = self.v_proj(x)  # (..., T, C) @ (C, C) -> (..., T, C)
        # 2. split heads (multi-head only)
        q = _split_heads(q, self.n_heads)  # (..., T, C) -> (..., H, T, D)
        k = _split_heads(k, self.n_heads)  # (..., T, C) -> (..., H, T, D)
        v = _split_heads(v, self.n_heads)  # (..., T, C) -> (..., H, T, D)
        out, weights = _attend(q, k, v, mask, self.scale)  # steps 3 to 7
        # 7. (continued) merge heads, output projection
        out = _merge_heads(out.astype(x.dtype))  # (..., H, T, D) -> (..., T, C)
        out = self.out_proj(out)  # (..., T, C) @ (C, C) -> (..., T, C)
        return out, weights.astype(x.dtype)

    def init_cache(self, batch, max_len):
        """An empty KVCache for decoding up to `max_len` tokens (kv_cache.py).

        batch: the leading axes of x, e.g. () for one sequence.
        """
        kernel = self.q_proj.kernel[...]
        return kv_cache.init_kv_cache(
            batch, max_len, kernel.shape[0], self.n_heads, kernel.dtype.name
        )

    def decode_step(self, x_t, cache):
        """x_t (..., C), cache -> out_t (..., C), a new cache with x_t in it.

        Pure in the cache (a new one is returned), so it runs under `nnx.jit`.
        """
        return kv_cache.decode_step(
            x_t,
            cache,
            self.q_proj.kernel[...],
            self.k_proj.kernel[...],
            self.v_proj.kernel[...],
            self.out_proj.kernel[...],
            self.n_heads,
            scale=self.scale,
        )
