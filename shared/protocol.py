"""The backend protocol: what each of impl_numpy, impl_torch and impl_jax exports.

A backend is a module, and `Backend` is the protocol that module satisfies
(PEP 544: a module's functions stand for the methods, without `self`). Arrays
are the framework's own (`np.ndarray`, `torch.Tensor`, `jax.Array`), written
`Array` here. `tests/test_backend.py` checks that every backend has every name
below with exactly these parameters, in this order, with these defaults; a
framework may add keyword-only extras with a default (torch: `device=`).

Shape legend: ... batch axes, T sequence, C model width (d_model), H heads,
D head width (C // H; D = C for single-head attention).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

Array = Any
"""The framework's own array type."""


@runtime_checkable
class Backend(Protocol):
    """The names every `impl_*` module exports, with their signatures."""

    CausalSelfAttention: type
    """The module form: `from_weights(w_q, w_k, w_v, w_o, n_heads, *, scale,
    biases, variant)`, `from_layer(layer)`, forward -> (out, weights),
    `init_cache`, `decode_step`."""

    KVCache: type
    """NamedTuple (k, v, length): k, v (..., H, max_len, D), length 0-d int."""

    # the forward pass (attention.py)

    def causal_mask(self, T) -> Array:
        """bool (T, T), True where a query may attend (j <= i)."""
        ...

    def key_padding_mask(self, lengths_or_keep, T, *, multi_head=False) -> Array:
        """bool (..., 1, T), or (..., 1, 1, T) with multi_head: True = a real key."""
        ...

    def single_head_attention(
        self, x, w_q, w_k, w_v, mask=None, *, scale=True, biases=None
    ) -> tuple[Array, Array]:
        """x (..., T, C); w_* (C, D); biases {"b_q", "b_k", "b_v": (D,)}
        -> out (..., T, D), weights (..., T, T)."""
        ...

    def multi_head_attention(
        self, x, w_q, w_k, w_v, w_o, n_heads, mask=None, *, scale=True, biases=None,
        variant=None,
    ) -> tuple[Array, Array]:  # fmt: skip
        """x (..., T, C); w_* (C, C); biases {"b_q", ..., "b_o": (C,)};
        variant a shared.Variant -> out (..., T, C), weights (..., H, T, T)."""
        ...

    def attention_entropy(self, weights) -> Array:
        """weights (..., T) -> entropy of each row (...,), in nats."""
        ...

    # the backward pass (backward.py)

    def single_head_attention_backward(
        self, x, w_q, w_k, w_v, d_out, mask=None, *, scale=True, biases=None
    ) -> dict[str, Array]:
        """d_out (..., T, D) -> {"x", "w_q", "w_k", "w_v", and each b_* given}."""
        ...

    def multi_head_attention_backward(
        self, x, w_q, w_k, w_v, w_o, n_heads, d_out, mask=None, *, scale=True,
        biases=None,
    ) -> dict[str, Array]:  # fmt: skip
        """d_out (..., T, C) -> {"x", "w_q", "w_k", "w_v", "w_o", each b_* given}."""
        ...

    # blockwise attention and the KV cache (blockwise.py, kv_cache.py)

    def blockwise_attention(
        self, q, k, v, *, block_size=512, causal=True, scale=True, visit=None,
        variant=None,
    ) -> tuple[Array, Array]:  # fmt: skip
        """q, k, v (..., T, D) -> out (..., T, D), lse (..., T)."""
        ...

    def multi_head_blockwise_attention(
        self, x, w_q, w_k, w_v, w_o, n_heads, *, block_size=512, causal=True,
        scale=True, biases=None, variant=None,
    ) -> tuple[Array, Array]:  # fmt: skip
        """x (..., T, C) -> out (..., T, C), lse (..., H, T)."""
        ...

    def init_kv_cache(
        self, batch, max_len, d_model, n_heads, dtype="float32", *, variant=None
    ) -> Any:
        """An empty KVCache for decoding up to max_len tokens."""
        ...

    def decode_step(
        self, x_t, cache, w_q, w_k, w_v, w_o, n_heads, *, scale=True, biases=None,
        variant=None,
    ) -> tuple[Array, Any]:  # fmt: skip
        """x_t (..., C) at position cache.length -> out_t (..., C), the new cache."""
        ...

    # arrays in and out

    def from_numpy(self, array, dtype=None) -> Array:
        """A NumPy array as the framework's, cast to dtype (a name) if given."""
        ...

    def to_numpy(self, array) -> Any:
        """The framework's array as a NumPy array (bfloat16 via ml_dtypes)."""
        ...
