"""The torch backward against torch's own tools: the full Jacobian from
torch.autograd.functional.jacobian, gradients of the nn.Module form and of
nn.MultiheadAttention (read through the layout converters), and the caller's
tensors left alone."""

from __future__ import annotations

import numpy as np
import torch
from helpers import (
    PARAM_NAMES,
    functional_gradients,
    gradient_case,
    gradient_tolerances,
)
from torch_helpers import torch_multihead_attention

import impl_numpy
import impl_torch
from shared import assert_close
from shared.layout import from_torch_in_proj, from_torch_linear


def test_autograd_jacobian_is_causal_and_equals_the_numpy_backward(dtype):
    x, params, n_heads, _ = gradient_case("tiny", dtype)
    w = [torch.from_numpy(params[k]) for k in PARAM_NAMES]

    def out_of_x(x):
        return impl_torch.multi_head_attention(x, *w, n_heads)[0]

    jacobian = torch.autograd.functional.jacobian(out_of_x, torch.from_numpy(x))
    jacobian = jacobian.numpy()  # (T, C, T, C): d out[i, c] / d x[j, c']
    T = x.shape[0]
    future = np.triu(np.ones((T, T), dtype=bool), k=1)  # j > i
    assert np.all(jacobian.transpose(0, 2, 1, 3)[future] == 0)
    assert np.all(np.any(jacobian.transpose(0, 2, 1, 3)[~future] != 0, axis=(1, 2)))
    # the same Jacobian, row by row, from the hand-written NumPy backward
    x64, params64, _, _ = gradient_case("tiny", "float64")
    rows = [
        impl_numpy.multi_head_attention_backward(
            x64, *(params64[k] for k in PARAM_NAMES), n_heads, one_hot.reshape(x.shape)
        )["x"]
        for one_hot in np.eye(x.size)
    ]
    # the x-gradient's tolerance on the same preset (docs/suite.md)
    tolerance = gradient_tolerances("tiny", "multi", dtype)["x"]
    assert_close(jacobian, np.stack(rows).reshape(jacobian.shape), tolerance)


def test_module_gradients_equal_the_functional_ones(dtype):
    x, params, n_heads, d_out = gradient_case("batched", dtype)
    module = impl_torch.CausalSelfAttention.from_weights(
        *(params[k] for k in PARAM_NAMES), n_heads
    )
    x_t = torch.from_numpy(x).requires_grad_()
    out, _ = module(x_t)
    out.backward(torch.from_numpy(d_out))
    expected = functional_gradients(impl_torch, x, params, n_heads, d_out, dtype)
    linears = (module.q_proj, module.k_proj, module.v_proj, module.out_proj)
    # nn.Linear takes another BLAS path than x @ w: equal to rounding
    tolerances = gradient_tolerances("batched", "multi", dtype)
    assert_close(x_t.grad.numpy(), expected["x"], tolerances["x"], "module d_x")
    for linear, name in zip(linears, PARAM_NAMES, strict=True):
        grad = from_torch_linear(linear.weight.grad.numpy())  # (out, in) -> (in, out)
        assert_close(grad, expected[name], tolerances[name], f"module d_{name}")


def test_nn_multihead_attention_gradients_equal_ours(dtype):
    x, params, n_heads, d_out = gradient_case("batched", dtype)
    x = x.reshape(-1, *x.shape[-2:])  # nn.MultiheadAttention takes one batch axis
    d_out = d_out.reshape(x.shape)
    T = x.shape[-2]
    mha = torch_multihead_attention(params, n_heads, dtype)
    x_t = torch.from_numpy(x).requires_grad_()
    not_allowed = ~impl_torch.causal_mask(T)  # nn.MultiheadAttention: True = may NOT
    out, _ = mha(x_t, x_t, x_t, attn_mask=not_allowed, need_weights=False)
    out.backward(torch.from_numpy(d_out))
    expected = functional_gradients(impl_torch, x, params, n_heads, d_out, dtype)
    tolerances = gradient_tolerances("batched", "multi", dtype)
    what = "nn.MultiheadAttention"
    assert_close(x_t.grad.numpy(), expected["x"], tolerances["x"], f"{what} d_x")
    in_proj_grads = from_torch_in_proj(mha.in_proj_weight.grad.numpy())
    for name, grad in zip(PARAM_NAMES[:3], in_proj_grads, strict=True):
        assert_close(grad, expected[name], tolerances[name], f"{what} d_{name}")
    w_o_grad = from_torch_linear(mha.out_proj.weight.grad.numpy())
    assert_close(w_o_grad, expected["w_o"], tolerances["w_o"], f"{what} d_w_o")


def test_the_callers_tensors_are_left_alone():
    x, params, n_heads, d_out = gradient_case("tiny", "float64")
    leaves = [torch.from_numpy(a).requires_grad_() for a in (x, *params.values())]
    expected = functional_gradients(impl_torch, x, params, n_heads, d_out, "float64")
    with torch.no_grad():  # the backward records its own forward regardless
        grads = impl_torch.multi_head_attention_backward(
            *leaves[:5], n_heads, torch.from_numpy(d_out)
        )
    for name, grad in grads.items():
        assert not grad.requires_grad
        np.testing.assert_array_equal(grad.numpy(), expected[name])
    assert all(leaf.grad is None for leaf in leaves)  # nothing accumulated


def test_runs_on_the_device_of_its_input():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x, params, n_heads, d_out = gradient_case("tiny", "float32")
    args = [torch.from_numpy(a).to(device) for a in (x, *params.values(), d_out)]
    grads = impl_torch.multi_head_attention_backward(*args[:5], n_heads, args[5])
    expected = functional_gradients(impl_torch, x, params, n_heads, d_out, "float32")
    tolerances = gradient_tolerances("tiny", "multi", "float32")
    for name, grad in grads.items():
        assert grad.device.type == device
        assert_close(grad.cpu().numpy(), expected[name], tolerances[name], f"d_{name}")
