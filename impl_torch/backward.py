"""The backward pass in PyTorch, through torch.autograd on the forward.

One of three parallel files (impl_numpy, impl_torch, impl_jax) with the same
names and the same order. impl_numpy/backward.py writes the seven forward
steps in reverse by hand, with the math; here autograd records the forward of
`attention.py` and replays it in reverse (`torch.autograd.grad`), and the test
suite proves the two equal.

Notation: L is a scalar loss, and d_a is dL/da, an array of a's shape. A
backward function is given d_out = dL/d out and returns d_x, d_w_q, ...: the
vector-Jacobian product of the forward with d_out. Only `out` is
differentiated; the weights the forward also returns are a by-product.

Shape legend: B batch (any leading axes, written ...), T sequence,
C model width (d_model), H heads, D head width (d_head = C // H).
"""

from __future__ import annotations

import torch

from impl_torch.attention import multi_head_attention, single_head_attention
from shared.validation import check_d_out, check_multi_head, check_single_head


def single_head_attention_backward(x, w_q, w_k, w_v, d_out, mask=None, *, scale=True):
    """Gradients of one head of causal self-attention.

    Args:
        x, w_q, w_k, w_v, mask, scale: as for `single_head_attention`.
        d_out: (..., T, D) gradient of the loss with respect to out, x's dtype.

    Returns:
        {"x": (..., T, C), "w_q", "w_k", "w_v": (C, D)}, the gradients of the
        loss, in x's dtype. The weight gradients sum over every position of
        every batch item.
    """
    dims = check_single_head(x, w_q, w_k, w_v, mask)
    check_d_out(d_out, x, (*dims.batch, dims.T, dims.D), "(..., T, D)")
    inputs = {"x": x, "w_q": w_q, "w_k": w_k, "w_v": w_v}
    # Fresh leaves, so that no caller's graph or .grad is touched.
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
    """Gradients of multi-head causal self-attention.

    Args:
        x, w_q, w_k, w_v, w_o, n_heads, mask, scale: as for
            `multi_head_attention`.
        d_out: (..., T, C) gradient of the loss with respect to out, x's dtype.

    Returns:
        {"x": (..., T, C), "w_q", "w_k", "w_v", "w_o": (C, C)}, the gradients
        of the loss, in x's dtype. The weight gradients sum over every
        position of every batch item.
    """
    dims = check_multi_head(x, w_q, w_k, w_v, w_o, n_heads, mask)
    check_d_out(d_out, x, (*dims.batch, dims.T, dims.C), "(..., T, C)")
    inputs = {"x": x, "w_q": w_q, "w_k": w_k, "w_v": w_v, "w_o": w_o}
    # Fresh leaves, so that no caller's graph or .grad is touched.
    leaves = {name: a.detach().requires_grad_() for name, a in inputs.items()}
    # forward again: steps 1 to 7, recorded by autograd
    with torch.enable_grad():
        out, _ = multi_head_attention(**leaves, n_heads=n_heads, mask=mask, scale=scale)
    # backward: the seven steps in reverse, from d_out to the inputs
    grads = torch.autograd.grad(out, tuple(leaves.values()), grad_outputs=d_out)
    return dict(zip(leaves, grads, strict=True))
