"""Causal self-attention in PyTorch (imports torch, numpy for I/O, and shared)."""

from impl_torch.arrays import from_numpy, to_numpy
from impl_torch.attention import (
    attention_entropy,
    causal_mask,
    key_padding_mask,
    multi_head_attention,
    single_head_attention,
)
from impl_torch.backward import (
    multi_head_attention_backward,
    single_head_attention_backward,
)
from impl_torch.blockwise import (
    blockwise_attention,
    multi_head_blockwise_attention,
)
from impl_torch.kv_cache import KVCache, decode_step, init_kv_cache
from impl_torch.module import CausalSelfAttention

__all__ = [
    "CausalSelfAttention",
    "KVCache",
    "attention_entropy",
    "blockwise_attention",
    "causal_mask",
    "decode_step",
    "from_numpy",
    "init_kv_cache",
    "key_padding_mask",
    "multi_head_attention",
    "multi_head_attention_backward",
    "multi_head_blockwise_attention",
    "single_head_attention",
    "single_head_attention_backward",
    "to_numpy",
]
