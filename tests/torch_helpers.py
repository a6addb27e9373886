"""Helpers for the torch-only tests (tests/test_torch_*.py); imports torch."""

from __future__ import annotations

import torch
from helpers import PARAM_NAMES

from shared.layout import to_torch_in_proj, to_torch_linear


def torch_multihead_attention(params, n_heads, dtype):
    """torch.nn.MultiheadAttention (batch_first, no bias) holding our (C, C)
    NumPy projections, read through the layout converters."""
    C = params["w_q"].shape[0]
    mha = torch.nn.MultiheadAttention(
        C, n_heads, bias=False, batch_first=True, dtype=getattr(torch, dtype)
    )
    with torch.no_grad():
        mha.in_proj_weight.copy_(
            torch.from_numpy(to_torch_in_proj(*(params[k] for k in PARAM_NAMES[:3])))
        )
        mha.out_proj.weight.copy_(torch.from_numpy(to_torch_linear(params["w_o"])))
    return mha
