"""Causal self-attention for the array API standard (array_api_strict): the
fourth backend of tests/test_fourth_backend.py, registered there only."""

from impl_array_api.arrays import from_numpy, to_numpy
from impl_array_api.attention import (
    attention_entropy,
    causal_mask,
    multi_head_attention,
    single_head_attention,
)

__all__ = [
    "attention_entropy",
    "causal_mask",
    "from_numpy",
    "multi_head_attention",
    "single_head_attention",
    "to_numpy",
]
