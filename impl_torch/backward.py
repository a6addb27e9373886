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
    inputs = {"x": x, "w_q": w_q, "w_k": w_k, "w_v": w_v, **given(biases)}
    # fresh leaves of the tape, so that no caller's graph or .grad is touched
    leaves = {name: a.detach().requires_grad_() for name, a in inputs.items()}
    weights, biases = split_leaves(leaves)
    # forward again: steps 1 to 7, recorded by autograd
    with torch.enable_grad():
        out, _ = single_head_attention(**weights, mask=mask, scale=scale, biases=biases)
    # backward: the seven steps in reverse, from d_out to the inputs
    grads = torch.autograd.grad(out, tuple(leaves.values()), grad_outputs=d_out)
    return dict(zip(leaves, grads, strict=True))


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
    inputs = {"x": x, "w_q": w_q, "w_k": w_k, "w_v": w_v, "w_o": w_o, **given(biases)}
    # fresh leaves of the tape, so that no caller's graph or .grad is touched
    leaves = {name: a.detach().requires_grad_() for name, a in inputs.items()}
    weights, biases = split_leaves(leaves)
    # forward again: steps 1 to 7, recorded by autograd
    with torch.enable_grad():
        out, _ = multi_head_attention(
            **weights, n_heads=n_heads, mask=mask, scale=scale, biases=biases
        )
    # backward: the seven steps in reverse, from d_out to the inputs
    grads = torch.autograd.grad(out, tuple(leaves.values()), grad_outputs=d_out)
    return dict(zip(leaves, grads, strict=True))


def given(biases):
    """The biases that are not None, by name: the ones to differentiate."""
    return {name: b for name, b in (biases or {}).items() if b is not None}


def split_leaves(leaves):
    """The leaves as the forward takes them: x and the weights by name, and
    the biases' dict."""
    biases = {name: a for name, a in leaves.items() if name.startswith("b_")}
    return {n: a for n, a in leaves.items() if n not in biases}, biases
