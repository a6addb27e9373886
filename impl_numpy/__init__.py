"""Causal self-attention in NumPy (imports numpy and shared only)."""

from impl_numpy.arrays import from_numpy, to_numpy
from impl_numpy.attention import (
    attention_entropy,
    causal_mask,
    multi_head_attention,
    single_head_attention,
)
from impl_numpy.backward import (
    multi_head_attention_backward,
    single_head_attention_backward,
)
from impl_numpy.module import CausalSelfAttention

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
