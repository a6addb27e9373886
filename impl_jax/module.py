"""The module form in JAX: a flax `nnx.Module` built on four `nnx.Linear` layers.

`nnx.Linear.kernel` has our (in, out) layout already, so `from_weights` copies
the numbers as they are (through `shared.layout.to_flax_linear`, named so that
the mapping is visible). Run it eagerly, or under `nnx.jit`.
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx

from impl_jax import attention, kv_cache
from impl_jax.arrays import require_x64_for
from shared.convert import params_from
from shared.layout import to_flax_linear
from shared.validation import check_heads, check_numpy_weights


class CausalSelfAttention(nnx.Module):
    """Multi-head causal self-attention.

    Attributes:
        q_proj, k_proj, v_proj, out_proj: nnx.Linear(C, C), with biases or not.
        n_heads: H.
        scale: divide scores by sqrt(D).
    """

    def __init__(
        self, d_model, n_heads, *, bias=False, scale=True, param_dtype=jnp.float32, rngs
    ):
        require_x64_for(param_dtype)  # float64 needs x64 (docs/contract.md)
        self.n_heads = check_heads(d_model, n_heads)
        self.scale = scale
        kwargs = dict(use_bias=bias, param_dtype=param_dtype, rngs=rngs)
        self.q_proj = nnx.Linear(d_model, d_model, **kwargs)
        self.k_proj = nnx.Linear(d_model, d_model, **kwargs)
        self.v_proj = nnx.Linear(d_model, d_model, **kwargs)
        self.out_proj = nnx.Linear(d_model, d_model, **kwargs)

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
        """A module loaded with (C, C) NumPy projections in the (in, out) layout
        and the (C,) biases given (zeros for the others if any is)."""
        given = check_numpy_weights(
            w_q=w_q, w_k=w_k, w_v=w_v, w_o=w_o, b_q=b_q, b_k=b_k, b_v=b_v, b_o=b_o
        )
        bias = any(name.startswith("b_") for name in given)
        module = cls(
            w_q.shape[0],
            n_heads,
            bias=bias,
            scale=scale,
            param_dtype=w_q.dtype,
            rngs=nnx.Rngs(0),
        )
        layers = {"q": module.q_proj, "k": module.k_proj, "v": module.v_proj}
        layers["o"] = module.out_proj
        for name, array in given.items():
            kind, key = name.split("_")
            if kind == "w":  # nnx.Linear keeps (in, out), as we do
                layers[key].kernel[...] = jnp.asarray(to_flax_linear(array))
            else:
                layers[key].bias[...] = jnp.asarray(array)
        return module

    @classmethod
    def from_layer(cls, layer):
        """A module with the parameters of another library's attention layer
        (shared.convert.params_from says which), in the layer's dtype."""
        p = params_from(layer)
        weights, biases = p.weights_as(p.dtype), p.biases_as(p.dtype)
        return cls.from_weights(*weights, p.n_heads, scale=p.scale, **biases)

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
        """w_q, w_k, w_v, w_o (C, C): nnx.Linear's kernels, already (in, out)."""
        linears = (self.q_proj, self.k_proj, self.v_proj, self.out_proj)
        return tuple(linear.kernel[...] for linear in linears)

    def biases(self):
        """b_q, b_k, b_v, b_o by name: each Linear's bias (C,), or None. Read on
        every call, so a layer swapped for a biased one counts in forward and in
        decode_step alike."""
        linears = (self.q_proj, self.k_proj, self.v_proj, self.out_proj)
        names = ("b_q", "b_k", "b_v", "b_o")
        return {
            name: None if linear.bias is None else linear.bias[...]
            for name, linear in zip(names, linears, strict=True)
        }

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
            *self.projections(),
            self.n_heads,
            scale=self.scale,
            **self.biases(),
        )
