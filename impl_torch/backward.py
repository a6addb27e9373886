"""The backward pass in PyTorch: torch.autograd replays the forward in reverse.

impl_numpy/backward.py writes each step's gradient by hand, with the math; here
autograd records the forward of attention.py as it runs (the tape) and
`torch.autograd.grad` walks it back. The suite proves the two equal.
Shapes as in attention.py: ... batch, T, C, H heads, D = C // H.
"""

from __future__ import annotations

import torch

from impl_torch.arrays import FRAMEWORK
from impl_torch.attention import multi_head_attention, single_head_attention
from shared.validation.attention import (
    check_d_out,
    check_multi_head,
    check_single_head,
)


def single_head_attention_backward(
    x, w_q, w_k, w_v, d_out, mask=None, *, scale=True, biases=None
):
    """Gradients of `single_head_attention` given d_out = dL/d out (..., T, D):
    {"x": (..., T, C), "w_q", "w_k", "w_v": (C, D)}, and "b_q", "b_k", "b_v"
    (D,) for the biases given, in x's dtype."""
    dims = check_single_head(x, w_q, w_k, w_v, mask, biases=biases, framework=FRAMEWORK)
    out_shape = (*dims.batch, dims.T, dims.D)
    check_d_out(d_out, x, out_shape, "(..., T, D)", framework=FRAMEWORK)
    inputs = {"x": x, "w_q": w_q, "w_k": w_k, "w_v": w_v}
    # fresh leaves of the tape, so that no caller's graph or .grad is touched
    leaves, bias_leaves = fresh_leaves(inputs), fresh_leaves(given(biases))
    # forward again: steps 1 to 7, recorded by autograd
    with torch.enable_grad():
        out, _ = single_head_attention(
            **leaves, mask=mask, scale=scale, biases=bias_leaves
        )
    # backward: the seven steps in reverse, from d_out to the inputs
    return gradients(out, d_out, leaves | bias_leaves)


def multi_head_attention_backward(
    x, w_q, w_k, w_v, w_o, n_heads, d_out, mask=None, *, scale=True, biases=None
):
    """Gradients of `multi_head_attention` given d_out = dL/d out (..., T, C):
    {"x": (..., T, C), "w_q", "w_k", "w_v", "w_o": (C, C)}, and "b_q", "b_k",
    "b_v", "b_o" (C,) for the biases given, in x's dtype."""
    dims, _ = check_multi_head(
        x, w_q, w_k, w_v, w_o, n_heads, mask, biases=biases, framework=FRAMEWORK
    )
    out_shape = (*dims.batch, dims.T, dims.C)
    check_d_out(d_out, x, out_shape, "(..., T, C)", framework=FRAMEWORK)
    inputs = {"x": x, "w_q": w_q, "w_k": w_k, "w_v": w_v, "w_o": w_o}
    # fresh leaves of the tape, so that no caller's graph or .grad is touched
    leaves, bias_leaves = fresh_leaves(inputs), fresh_leaves(given(biases))
    # forward again: steps 1 to 7, recorded by autograd
    with torch.enable_grad():
        out, _ = multi_head_attention(
            **leaves, n_heads=n_heads, mask=mask, scale=scale, biases=bias_leaves
        )
    # backward: the seven steps in reverse, from d_out to the inputs
    return gradients(out, d_out, leaves | bias_leaves)


def given(biases):
    """The biases that are not None, by name: the ones to differentiate."""
    return {name: b for name, b in (biases or {}).items() if b is not None}


def fresh_leaves(arrays):
    """Each array detached and made a leaf that records its gradient, by name."""
    return {name: a.detach().requires_grad_() for name, a in arrays.items()}


def gradients(out, d_out, leaves):
    """d out / d each leaf, given d_out, by the leaves' names."""
    grads = torch.autograd.grad(out, tuple(leaves.values()), grad_outputs=d_out)
    return dict(zip(leaves, grads, strict=True))
