"""The side-by-side page's differences between the frameworks that concern
torch (triptych/read/text.py), each checked by running the alternative: a
style choice runs the other spelling and gets the same numbers; a framework
difference runs what NumPy or JAX would write and shows torch does otherwise."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from shared import Variant


def test_swapaxes_is_transpose_in_torch():
    x = torch.arange(24.0).reshape(2, 3, 4)
    assert torch.equal(x.swapaxes(-3, -2), x.transpose(-3, -2))


def test_torch_inf_is_math_inf():
    scores = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    keep = torch.tensor([[True, False], [True, True]])
    assert torch.inf == math.inf
    assert torch.equal(
        torch.where(keep, scores, -torch.inf), torch.where(keep, scores, -math.inf)
    )


def test_torch_takes_axis_and_keepdims():
    x = torch.arange(6.0).reshape(2, 3)
    assert torch.equal(x.amax(axis=-1, keepdims=True), x.amax(dim=-1, keepdim=True))
    assert torch.equal(x.sum(axis=-1, keepdims=True), x.sum(dim=-1, keepdim=True))


def test_torch_max_over_a_dim_returns_indices_too():
    x = torch.tensor([[1.0, 3.0, 2.0]])
    values, indices = x.max(dim=-1)  # NumPy's x.max(axis=-1) is the values only
    assert values.tolist() == [3.0] and indices.tolist() == [1]
    assert torch.equal(x.amax(dim=-1), values)


def test_a_mask_on_another_device_fails_in_torch():
    """Scores on another device (meta: shapes, no values) and a mask made
    without device= (on the CPU): torch refuses to mix them."""
    scores = torch.empty(3, 3, device="meta")
    causal = torch.ones(3, 3, dtype=torch.bool).tril()  # no device=: the CPU
    with pytest.raises(RuntimeError, match="device"):
        torch.where(causal, scores, -torch.inf)
    on_device = torch.ones(3, 3, dtype=torch.bool, device=scores.device).tril()
    assert torch.where(on_device, scores, -torch.inf).device == scores.device


def test_backward_fills_the_callers_grad_and_autograd_grad_does_not():
    w = torch.ones(2, requires_grad=True)  # a caller's leaf
    (grad,) = torch.autograd.grad((w * 3.0).sum(), [w])
    assert w.grad is None and grad.tolist() == [3.0, 3.0]
    (w * 3.0).sum().backward()  # the alternative: it writes into w.grad
    assert w.grad.tolist() == [3.0, 3.0]


def test_torch_calls_forward_through_call():
    seen = []

    class Doubling(torch.nn.Module):
        def forward(self, x):
            return 2 * x

    layer = Doubling()
    layer.register_forward_hook(lambda module, args, out: seen.append(out))
    out = layer(torch.ones(1))  # __call__ runs forward, then the hooks
    assert out.tolist() == [2.0] and len(seen) == 1
    layer.forward(torch.ones(1))  # forward alone skips them
    assert len(seen) == 1


def test_an_in_place_write_carries_the_graph_without_no_grad():
    k = torch.ones(2, requires_grad=True)
    cache = torch.zeros(4)
    cache[:2] = k * 2.0  # the cache now belongs to k's graph
    assert cache.grad_fn is not None
    cache = torch.zeros(4)
    with torch.no_grad():
        cache[:2] = k * 2.0
    assert cache.grad_fn is None and not cache.requires_grad


def test_adam_steps_the_parameters_in_place():
    w = torch.nn.Parameter(torch.ones(2))
    adam = torch.optim.Adam([w], lr=0.1)
    before = w.data_ptr()
    (w**2).sum().backward()
    adam.step()
    assert w.data_ptr() == before and w.tolist() != [1.0, 1.0]


def test_torch_repeat_tiles_where_repeat_interleave_groups():
    """GQA's key/value heads for H = 4, H_kv = 2: repeat_interleave gives
    0, 0, 1, 1 (query head h reads h // 2), Tensor.repeat 0, 1, 0, 1 (h % 2),
    which is another attention."""
    import impl_torch
    from shared.reference import reference_multi_head

    heads = torch.arange(2)[:, None, None]  # (H_kv, 1, 1)
    assert heads.repeat_interleave(2, dim=-3).flatten().tolist() == [0, 0, 1, 1]
    assert heads.repeat(2, 1, 1).flatten().tolist() == [0, 1, 0, 1]
    rng = np.random.default_rng(30)
    x, w_q, w_o = (rng.standard_normal(shape) for shape in ((5, 8), (8, 8), (8, 8)))
    w_k, w_v = (rng.standard_normal((8, 4)) for _ in "kv")
    args = [torch.from_numpy(a) for a in (x, w_q, w_k, w_v, w_o)]
    out, _ = impl_torch.multi_head_attention(*args, 4, variant=Variant(n_kv_heads=2))
    grouped = [
        np.concatenate([w[:, :2], w[:, :2], w[:, 2:], w[:, 2:]], 1) for w in (w_k, w_v)
    ]
    tiled = [np.concatenate([w, w], 1) for w in (w_k, w_v)]
    np.testing.assert_allclose(
        out.numpy(), reference_multi_head(x, w_q, *grouped, w_o, 4)[0]
    )
    assert not np.allclose(out.numpy(), reference_multi_head(x, w_q, *tiled, w_o, 4)[0])


def test_torch_records_the_lessons_lines_on_a_tape_only_when_asked():
    """Eager: each line ran when Python reached it, and its value is there;
    with an input that requires a gradient, each line is also recorded on the
    autograd tape (grad_fn), which backward replays."""
    from impl_torch import lesson

    x, w = torch.ones(4, 8), torch.eye(8)[:, :4]
    out, _ = lesson.single_head_attention(x, w, w, w)
    assert out.grad_fn is None  # nothing asked for a gradient: no tape
    w_q = w.clone().requires_grad_()
    out, _ = lesson.single_head_attention(x, w_q, w, w)
    assert out.grad_fn is not None  # the tape's last node
    out.sum().backward()
    assert w_q.grad is not None and w_q.grad.shape == w_q.shape
