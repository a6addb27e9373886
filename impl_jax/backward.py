"""The backward pass in JAX: jax.vjp transposes the traced forward.

impl_numpy/backward.py writes each step's gradient by hand, with the math; here
`jax.vjp` traces the forward of attention.py (a pure function) and returns the
function that maps d_out to the gradients. The suite proves the two equal.
Shapes as in attention.py: ... batch, T, C, H heads, D = C // H.
"""

from __future__ import annotations

import jax

from impl_jax.arrays import FRAMEWORK
from impl_jax.attention import multi_head_attention, single_head_attention
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

    def forward(inputs, biases):
        out, _ = single_head_attention(**inputs, mask=mask, scale=scale, biases=biases)
        return out

    # forward again: steps 1 to 7, traced by jax.vjp
    biases = given(biases)
    _, out_vjp = jax.vjp(forward, inputs, biases)
    # backward: the seven steps in reverse, from d_out to the inputs
    grads, bias_grads = out_vjp(d_out)
    return in_order(grads | bias_grads, (*inputs, *biases))


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

    def forward(inputs, biases):
        out, _ = multi_head_attention(
            **inputs, n_heads=n_heads, mask=mask, scale=scale, biases=biases
        )
        return out

    # forward again: steps 1 to 7, traced by jax.vjp
    biases = given(biases)
    _, out_vjp = jax.vjp(forward, inputs, biases)
    # backward: the seven steps in reverse, from d_out to the inputs
    grads, bias_grads = out_vjp(d_out)
    return in_order(grads | bias_grads, (*inputs, *biases))


def given(biases):
    """The biases that are not None, by name: the ones to differentiate."""
    return {name: b for name, b in (biases or {}).items() if b is not None}


def in_order(grads, names):
    """The gradients by name in the order of `names` (a pytree's dict comes
    back with its keys sorted)."""
    return {name: grads[name] for name in names}


single_head_attention_backward_jit = jax.jit(
    single_head_attention_backward, static_argnames="scale"
)
multi_head_attention_backward_jit = jax.jit(
    multi_head_attention_backward, static_argnames=("n_heads", "scale")
)
