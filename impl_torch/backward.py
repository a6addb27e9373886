"""The backward pass in PyTorch: torch.autograd replays the forward in reverse.

impl_numpy/backward.py writes each step's gradient by hand, with the math; here
autograd records the forward of attention.py as it runs (the tape) and
`torch.autograd.grad` walks it back. The suite proves the two equal.
Shapes as in attention.py: ... batch, T, C, H heads, D = C // H.
"""

from __future__ import annotations

import torch

from impl_torch.attention import multi_head_attention, single_head_attention
from shared.validation import check_d_out, check_multi_head, check_single_head


def single_head_attention_backward(x, w_q, w_k, w_v, d_out, mask=None, *, scale=True):
    """Gradients of `single_head_attention` given d_out = dL/d out (..., T, D):
    {"x": (..., T, C), "w_q", "w_k", "w_v": (C, D)}, in x's dtype."""
    dims = check_single_head(x, w_q, w_k, w_v, mask)
    check_d_out(d_out, x, (*dims.batch, dims.T, dims.D), "(..., T, D)")
    inputs = {"x": x, "w_q": w_q, "w_k": w_k, "w_v": w_v}
    # fresh leaves of the tape, so that no caller's graph or .grad is touched
    leaves = {name: a.detach().requires_grad_() for name, a in inputs.items()}
    # forward again: steps 1 to 7, recorded by autograd
    with torch.enable_grad():
        out, _ = single_head_attention(**leaves, mask=mask, scale=scale)
    # backward: the seven steps in reverse, from d_out to the inputs
    grads = torch.autograd.grad(out, tuple(leaves.values()), grad_outputs=d_out)
    return dict(zip(leaves, grads, strict=True))


def multi_head_attention_backward(
    x, w_q, w_k, w_v, w_o, n_heads, d_out, mask=None, *, scale=True
):
    """Gradients of `multi_head_attention` given d_out = dL/d out (..., T, C):
    {"x": (..., T, C), "w_q", "w_k", "w_v", "w_o": (C, C)}, in x's dtype."""
    dims = check_multi_head(x, w_q, w_k, w_v, w_o, n_heads, mask)
    check_d_out(d_out, x, (*dims.batch, dims.T, dims.C), "(..., T, C)")
    inputs = {"x": x, "w_q": w_q, "w_k": w_k, "w_v": w_v, "w_o": w_o}
    # fresh leaves of the tape, so that no caller's graph or .grad is touched
    leaves = {name: a.detach().requires_grad_() for name, a in inputs.items()}
    # forward again: steps 1 to 7, recorded by autograd
    with torch.enable_grad():
        out, _ = multi_head_attention(**leaves, n_heads=n_heads, mask=mask, scale=scale)
    # backward: the seven steps in reverse, from d_out to the inputs
    grads = torch.autograd.grad(out, tuple(leaves.values()), grad_outputs=d_out)
    return dict(zip(leaves, grads, strict=True))
