"""Causal self-attention in PyTorch (imports torch, numpy for I/O, and shared)."""

from impl_torch.arrays import from_numpy, to_numpy
from impl_torch.attention import (
    attention_entropy,
    causal_mask,
    multi_head_attention,
    single_head_attention,
)
from impl_torch.backward import (
    multi_head_attention_backward,
    single_head_attention_backward,
)
from impl_torch.module import CausalSelfAttention

__all__ = [
    "CausalSelfAttention",
    "attention_entropy",
    "causal_mask",
    "from_numpy",
    "multi_head_attention",
    "multi_head_attention_backward",
    "single_head_attention",
    "single_head_attention_backward",
    "to_numpy",
]
