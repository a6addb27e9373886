"""Gradients through masks, by torch.autograd itself (not the backward helpers):
a fully masked row sends exactly zero gradient, and NaN padding, which the
forward never sees, still poisons the gradients."""

from __future__ import annotations

import numpy as np
import torch
from helpers import PARAM_NAMES, masked_problem

import impl_torch


def masked_tensors(dtype):
    """`helpers.masked_problem` in torch: [x, w_q, w_k, w_v, w_o] in `dtype`
    that require grad, the mask, and the (2, T) fully masked rows."""
    x, p, mask, empty = masked_problem()
    tensors = [
        torch.tensor(a, dtype=getattr(torch, dtype), requires_grad=True)
        for a in (x, *(p[k] for k in PARAM_NAMES))
    ]
    return tensors, torch.from_numpy(mask), torch.from_numpy(empty)


def test_fully_masked_rows_send_zero_gradient(dtype):
    inputs, mask, empty = masked_tensors(dtype)
    out, weights = impl_torch.multi_head_attention(*inputs, 2, mask)
    rng = np.random.default_rng(0)
    d_out = torch.from_numpy(rng.standard_normal(out.shape)).to(out.dtype)
    d_weights = torch.from_numpy(rng.standard_normal(weights.shape)).to(out.dtype)
    loss = (out * d_out).sum() + (weights * d_weights).sum()
    for grad in torch.autograd.grad(loss, inputs, retain_graph=True):
        assert torch.isfinite(grad).all()
    heads_empty = empty[:, None, :].expand(-1, 2, -1)  # (2, H, T)
    loss_of_empty_rows = (out * d_out)[empty].sum() + (weights * d_weights)[
        heads_empty
    ].sum()
    for grad in torch.autograd.grad(loss_of_empty_rows, inputs):
        assert (grad == 0).all()


def test_nan_padding_spares_the_forward_but_poisons_the_gradients():
    inputs, _, _ = masked_tensors("float32")
    x = inputs[0].detach().clone()
    x[1, 4:] = torch.nan  # item 1 is 4 long; its padding is NaN
    x.requires_grad_(True)
    mask = impl_torch.key_padding_mask(torch.tensor([6, 4]), 6, multi_head=True)
    out, _ = impl_torch.multi_head_attention(x, *inputs[1:], 2, mask)
    assert torch.isfinite(out[1, :4]).all()  # the forward never sees it
    grads = torch.autograd.grad(out[1, :4].sum(), [x, *inputs[1:]])
    # The backward of q = x @ w_q is x^T @ d_q: 0 * NaN = NaN. Pad with zeros.
    for grad in grads:
        assert torch.isnan(grad).any()


def test_causal_mask_takes_a_device():
    """causal_mask(device="cpu") under a default device of "meta" (shapes, no
    numbers): on the CPU, true on and below the diagonal; the default follows
    the default device (tests/test_options.py registers it)."""
    with torch.device("meta"):
        mask = impl_torch.causal_mask(5, device="cpu")
        assert impl_torch.causal_mask(5).device.type == "meta"
    assert mask.device.type == "cpu" and mask.dtype == torch.bool
    np.testing.assert_array_equal(mask.numpy(), np.tril(np.ones((5, 5), dtype=bool)))


def test_the_forward_makes_its_tensors_on_the_inputs_device_not_the_default():
    """The causal mask and every other tensor the forward makes are made on x's
    device, not on torch's default device (which pytest --device cuda sets to
    the GPU): under a default device of "meta" (shapes, no numbers), CPU inputs
    give CPU outputs equal to the float64 oracle. (Kills tox -e mutate-torch's
    mutant of allowed_keys that drops device=, docs/mutation.md.)"""
    from helpers import random_inputs

    from shared import assert_close
    from shared.reference import reference_multi_head, reference_single_head

    x, p = random_inputs(5, (2,), 6, 8)
    keep = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    mask = impl_torch.key_padding_mask(keep, 6, multi_head=True)  # (2, 1, 1, 6)
    args = [torch.from_numpy(a) for a in (x, *(p[n] for n in PARAM_NAMES))]
    with torch.device("meta"):
        out, weights = impl_torch.multi_head_attention(*args, 2, mask)
        one, one_weights = impl_torch.single_head_attention(*args[:4])
    found = (out, weights, one, one_weights)
    assert {a.device.type for a in found} == {"cpu"}
    expected = reference_multi_head(x, *p.values(), 2, mask=mask.numpy())
    expected += reference_single_head(x, *(p[n] for n in PARAM_NAMES[:3]))
    for name, a, e in zip(("out", "weights") * 2, found, expected, strict=True):
        assert_close(a.numpy(), e, "float64", name)
