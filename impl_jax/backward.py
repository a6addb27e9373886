"""The backward pass in JAX, through jax.vjp on the forward; pure and jittable.

One of three parallel files (impl_numpy, impl_torch, impl_jax) with the same
names and the same order. impl_numpy/backward.py writes the seven forward
steps in reverse by hand, with the math; here `jax.vjp` traces the forward of
`attention.py` and transposes it, and the test suite proves the two equal.
The jitted exports at the bottom mark `n_heads` and `scale` static, as the
forward's do; validation reads only shapes and dtypes, so it runs once, at
trace time.

Notation: L is a scalar loss, and d_a is dL/da, an array of a's shape. A
backward function is given d_out = dL/d out and returns d_x, d_w_q, ...: the
vector-Jacobian product of the forward with d_out. Only `out` is
differentiated; the weights the forward also returns are a by-product.

Shape legend: B batch (any leading axes, written ...), T sequence,
C model width (d_model), H heads, D head width (d_head = C // H).
"""

from __future__ import annotations

import jax

from impl_jax.attention import multi_head_attention, single_head_attention
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

    def forward(inputs):
        """out as a function of the inputs we differentiate."""
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

    def forward(inputs):
        """out as a function of the inputs we differentiate."""
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
