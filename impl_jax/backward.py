"""The backward pass in JAX: jax.vjp transposes the traced forward.

impl_numpy/backward.py writes each step's gradient by hand, with the math; here
`jax.vjp` traces the forward of attention.py (a pure function) and returns the
function that maps d_out to the gradients. The suite proves the two equal.
Shapes as in attention.py: ... batch, T, C, H heads, D = C // H.
"""

from __future__ import annotations

import jax

from impl_jax.attention import multi_head_attention, single_head_attention
from shared.validation import check_d_out, check_multi_head, check_single_head


def single_head_attention_backward(x, w_q, w_k, w_v, d_out, mask=None, *, scale=True):
    """Gradients of `single_head_attention` given d_out = dL/d out (..., T, D):
    {"x": (..., T, C), "w_q", "w_k", "w_v": (C, D)}, in x's dtype."""
    dims = check_single_head(x, w_q, w_k, w_v, mask)
    check_d_out(d_out, x, (*dims.batch, dims.T, dims.D), "(..., T, D)")
    inputs = {"x": x, "w_q": w_q, "w_k": w_k, "w_v": w_v}

    def forward(inputs):
        out, _ = single_head_attention(**inputs, mask=mask, scale=scale)
        return out

    # forward again: steps 1 to 7, traced by jax.vjp
    _, out_vjp = jax.vjp(forward, inputs)
    # backward: the seven steps in reverse, from d_out to the inputs
    (grads,) = out_vjp(d_out)
    return {name: grads[name] for name in inputs}


def multi_head_attention_backward(
    x, w_q, w_k, w_v, w_o, n_heads, d_out, mask=None, *, scale=True
):
    """Gradients of `multi_head_attention` given d_out = dL/d out (..., T, C):
    {"x": (..., T, C), "w_q", "w_k", "w_v", "w_o": (C, C)}, in x's dtype."""
    dims = check_multi_head(x, w_q, w_k, w_v, w_o, n_heads, mask)
    check_d_out(d_out, x, (*dims.batch, dims.T, dims.C), "(..., T, C)")
    inputs = {"x": x, "w_q": w_q, "w_k": w_k, "w_v": w_v, "w_o": w_o}

    def forward(inputs):
        out, _ = multi_head_attention(**inputs, n_heads=n_heads, mask=mask, scale=scale)
        return out

    # forward again: steps 1 to 7, traced by jax.vjp
    _, out_vjp = jax.vjp(forward, inputs)
    # backward: the seven steps in reverse, from d_out to the inputs
    (grads,) = out_vjp(d_out)
    return {name: grads[name] for name in inputs}


single_head_attention_backward_jit = jax.jit(
    single_head_attention_backward, static_argnames="scale"
)
multi_head_attention_backward_jit = jax.jit(
    multi_head_attention_backward, static_argnames=("n_heads", "scale")
)
