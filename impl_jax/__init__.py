"""Causal self-attention in JAX, and a flax nnx module (imports jax, flax, numpy
for I/O, and shared).

Importing this package turns on `jax_enable_x64`: without it JAX silently
computes float64 inputs in float32, and this project checks float64 against a
float64 oracle. Inputs of other dtypes are unaffected.
"""

import jax

jax.config.update("jax_enable_x64", True)

from impl_jax.arrays import from_numpy, to_numpy  # noqa: E402
from impl_jax.attention import (  # noqa: E402
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
from impl_jax.backward import (  # noqa: E402
    multi_head_attention_backward,
    multi_head_attention_backward_jit,
    single_head_attention_backward,
    single_head_attention_backward_jit,
)
from impl_jax.blockwise import (  # noqa: E402
    blockwise_attention,
    blockwise_attention_jit,
    multi_head_blockwise_attention,
    multi_head_blockwise_attention_jit,
)
from impl_jax.kv_cache import (  # noqa: E402
    KVCache,
    decode_step,
    decode_step_jit,
    init_kv_cache,
)
from impl_jax.module import CausalSelfAttention  # noqa: E402

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
