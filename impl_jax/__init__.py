"""Causal self-attention in JAX, and a flax nnx module (imports jax, flax, numpy
for I/O, and shared). Importing it changes no JAX setting: float64 needs the
caller to turn on x64 (docs/contract.md)."""

from impl_jax.arrays import from_numpy, to_numpy
from impl_jax.attention import (
    attention_entropy,
    attention_entropy_jit,
    causal_mask,
    key_padding_mask,
    key_padding_mask_jit,
    multi_head_attention,
    multi_head_attention_jit,
    single_head_attention,
    single_head_attention_jit,
)
from impl_jax.backward import (
    multi_head_attention_backward,
    multi_head_attention_backward_jit,
    single_head_attention_backward,
    single_head_attention_backward_jit,
)
from impl_jax.blockwise import (
    blockwise_attention,
    blockwise_attention_jit,
    multi_head_blockwise_attention,
    multi_head_blockwise_attention_jit,
)
from impl_jax.kv_cache import (
    KVCache,
    decode_step,
    decode_step_jit,
    init_kv_cache,
)
from impl_jax.module import CausalSelfAttention

__all__ = [
    "CausalSelfAttention",
    "KVCache",
    "attention_entropy",
    "attention_entropy_jit",
    "blockwise_attention",
    "blockwise_attention_jit",
    "causal_mask",
    "decode_step",
    "decode_step_jit",
    "from_numpy",
    "init_kv_cache",
    "key_padding_mask",
    "key_padding_mask_jit",
    "multi_head_attention",
    "multi_head_attention_backward",
    "multi_head_attention_backward_jit",
    "multi_head_attention_jit",
    "multi_head_blockwise_attention",
    "multi_head_blockwise_attention_jit",
    "single_head_attention",
    "single_head_attention_backward",
    "single_head_attention_backward_jit",
    "single_head_attention_jit",
    "to_numpy",
]
