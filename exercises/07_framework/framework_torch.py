"""Exercise 7, PyTorch: attention as a layer (nn.Module), and autograd.

Replace each `raise NotImplementedError` with the lines it names; the
hints are in README.md beside this file. Grade it:

    python exercises/grade.py exercises/07_framework/framework_torch.py

The answer key is your teacher's (docs/teaching.md#answer-key).
"""

# ruff: noqa: F401 (a skeleton: its names wait for your lines)

import math

import torch
from torch import nn


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention as a layer: x (..., T, C) -> out
    (..., T, C). Its four weights w_q, w_k, w_v, w_o (C, C) are its
    parameters, used as x @ w (in, out)."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        # the four weights, (C, C) each, registered as the module's parameters
        raise NotImplementedError("the parameters: see README.md")

    def forward(self, x):
        # the seven steps of the lesson's multi_head_attention on the
        # module's weights (impl_torch/lesson.py): return out only
        raise NotImplementedError("forward: see README.md")


def weight_gradients(module, x, d_out):
    """The gradients of sum(module(x) * d_out) with respect to the module's
    w_q, w_k, w_v, w_o, by autograd: a tuple of four (C, C) tensors."""
    raise NotImplementedError("autograd: see README.md")
