"""What only torch has, for blockwise attention and the KV cache: agreement with
F.scaled_dot_product_attention, torch.compile of the blockwise loops, the
module's decode step under no_grad, and IndexError past max_len."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import PARAM_NAMES, golden, random_inputs

import impl_torch
from impl_torch import tuned
from shared import assert_close
from shared.reference import reference_multi_head


def _qkv(dtype, batch=(2, 3), T=13, D=8, seed=0):
    rng = np.random.default_rng(seed)
    return [
        impl_torch.from_numpy(rng.standard_normal((*batch, T, D)), dtype) for _ in "qkv"
    ]


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "noncausal"])
def test_blockwise_equals_scaled_dot_product_attention(dtype, causal):
    q, k, v = _qkv(dtype)
    ours, _ = impl_torch.blockwise_attention(q, k, v, block_size=4, causal=causal)
    theirs = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    assert_close(ours.numpy(), theirs.numpy(), dtype, "blockwise vs SDPA")


def test_torch_compile_of_blockwise_equals_eager():
    q, k, v = _qkv("float32", T=9)
    eager, eager_lse = impl_torch.blockwise_attention(q, k, v, block_size=4)
    compiled = torch.compile(
        impl_torch.blockwise_attention, fullgraph=True, dynamic=False
    )
    out, lse = compiled(q, k, v, block_size=4)
    assert_close(out.numpy(), eager.numpy(), "float32", "compiled out")
    assert_close(lse.numpy(), eager_lse.numpy(), "float32", "compiled lse")


def test_module_decode_step_runs_without_autograd():
    g = golden("tiny")
    module = impl_torch.CausalSelfAttention.from_weights(
        *(g[n] for n in PARAM_NAMES), 4
    )
    assert module.q_proj.weight.requires_grad
    cache = module.init_cache((), 8)
    out_t, cache = module.decode_step(impl_torch.from_numpy(g["x"][0]), cache)
    assert not out_t.requires_grad and not cache.k.requires_grad
    assert cache.k.dtype == torch.float64


def test_decoding_past_max_len_raises_index_error():
    g = golden("tiny")
    weights = [impl_torch.from_numpy(g[n]) for n in PARAM_NAMES]
    cache = impl_torch.init_kv_cache((), 2, 32, 4, "float64")
    x = impl_torch.from_numpy(g["x"])
    for t in range(2):
        _, cache = impl_torch.decode_step(x[t], cache, *weights, 4)
    with pytest.raises(IndexError):
        impl_torch.decode_step(x[2], cache, *weights, 4)


def test_init_kv_cache_takes_a_device():
    """init_kv_cache(device="cpu") under a default device of "meta" (shapes,
    no numbers): k, v and length on the CPU, and decoding into it equals the
    oracle (tests/test_options.py registers it)."""
    from helpers import options_problem

    from shared.reference import reference_multi_head

    case = options_problem()
    with torch.device("meta"):
        cache = impl_torch.init_kv_cache((2,), 6, 8, case.H, "float64", device="cpu")
        assert impl_torch.init_kv_cache((2,), 6, 8, case.H).k.device.type == "meta"
    assert {t.device.type for t in cache} == {"cpu"}
    x = torch.from_numpy(case.x)
    weights = [torch.from_numpy(case.params[n]) for n in PARAM_NAMES]
    outs = []
    for t in range(6):
        out_t, cache = impl_torch.decode_step(x[..., t, :], cache, *weights, case.H)
        outs.append(out_t.numpy())
    expected, _ = reference_multi_head(case.x, *case.params.values(), case.H)
    assert_close(np.stack(outs, axis=-2), expected, "float64", "decoded on the CPU")


def test_blockwise_and_decoding_make_their_tensors_on_the_inputs_device():
    """blockwise_attention's per-block masks and output, and decode_step's mask
    of the filled slots, are made on the inputs' device, not on torch's default
    device (pytest --device cuda sets the GPU there): under a default device of
    "meta" (shapes, no numbers), CPU inputs give CPU outputs equal to the float64
    oracle. (Kills tox -e mutate-torch's mutants that drop device=, among them
    `torch.empty(..., device=None)`, docs/mutation.md.)"""
    from helpers import random_inputs

    from shared.reference import reference_multi_head, reference_single_head

    x, p = random_inputs(6, (2,), 7, 8)
    w = [impl_torch.from_numpy(p[n]) for n in PARAM_NAMES]
    q, k, v = (impl_torch.from_numpy(x @ p[n]) for n in PARAM_NAMES[:3])
    cache = impl_torch.init_kv_cache((2,), 7, 8, 2, "float64", device="cpu")
    steps = []
    with torch.device("meta"):
        out, lse = impl_torch.blockwise_attention(q, k, v, block_size=4)
        for t in range(7):
            y, cache = impl_torch.decode_step(
                impl_torch.from_numpy(x[:, t], device="cpu"), cache, *w, 2
            )
            steps.append(y)
    decoded = torch.stack(steps, dim=-2)  # (2, T, C)
    assert {a.device.type for a in (out, lse, decoded, cache.k, cache.length)} == {
        "cpu"
    }
    expected, _ = reference_single_head(x, *(p[n] for n in PARAM_NAMES[:3]))
    assert_close(out.numpy(), expected, "float64", "blockwise out")
    expected, _ = reference_multi_head(x, *(p[n] for n in PARAM_NAMES), 2)
    assert_close(decoded.numpy(), expected, "float64", "decoded out")


def test_tuned_products_through_onednn_and_without_it_equal_the_oracle(monkeypatch):
    """impl_torch/tuned.py sends float32 products to oneDNN's linear op where
    torch has it, and to `@` where it does not: both the oracle's numbers, and
    the op really called (a batch, a tail block, a strided weight given)."""
    x, p = random_inputs(5, (2,), 11, 16)
    expected, _ = reference_multi_head(x, *(p[n] for n in PARAM_NAMES), 4)
    args = [
        impl_torch.from_numpy(a, "float32") for a in (x, *(p[n] for n in PARAM_NAMES))
    ]
    calls = []
    linear = torch.ops.mkldnn._linear_pointwise

    def counted(*a):
        calls.append(a[1].is_contiguous())
        return linear(*a)

    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", counted)
    with_onednn = tuned.multi_head_tuned_attention(*args, 4, block_size=4)
    # 2 x 4 heads x 3 blocks x 2 products, and the two projections
    assert calls == [True] * (2 * 4 * 3 * 2 + 2)
    tuned._has_onednn_linear.cache_clear()
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    try:
        without = tuned.multi_head_tuned_attention(*args, 4, block_size=4)
    finally:
        tuned._has_onednn_linear.cache_clear()
    assert len(calls) == 2 * 4 * 3 * 2 + 2  # none more
    for out, how in ((with_onednn, "oneDNN"), (without, "@")):
        assert_close(out.numpy(), expected, "float32", f"tuned, products by {how}")
    a = torch.arange(12.0).reshape(3, 4)
    b = torch.arange(20.0).reshape(4, 5).mT  # (5, 4), strided
    assert torch.equal(tuned.times_transposed(a, b), a @ b.mT)


def test_tuned_gradients_equal_the_librarys(dtype):
    """oneDNN's op has no gradient: where autograd records, the tuned attention
    takes `@`, and its gradients are multi_head_attention's (the scores
    masked in place, the softmax torch's own)."""
    x, p = random_inputs(6, (2,), 11, 16)
    tensors = [
        impl_torch.from_numpy(a, dtype).requires_grad_()
        for a in (x, *(p[n] for n in PARAM_NAMES))
    ]
    out = tuned.multi_head_tuned_attention(*tensors, 4, block_size=4)
    grads = torch.autograd.grad(out.square().sum(), tensors)
    expected_out, _ = impl_torch.multi_head_attention(*tensors, 4)
    expected = torch.autograd.grad(expected_out.square().sum(), tensors)
    assert_close(out.detach().numpy(), expected_out.detach().numpy(), dtype, "out")
    for name, got, want in zip(("x", *PARAM_NAMES), grads, expected, strict=True):
        assert_close(got.numpy(), want.numpy(), dtype, f"the gradient of {name}")


def test_tuned_block_size_rule():
    """torch's measured Bq (docs/bench.md, "The block sizes"), which the
    bench's traffic model counts for torch-tuned."""
    from triptych.bench import roofline

    assert tuned.query_block_size(8192) == tuned.QUERY_BLOCK == 256
    assert tuned.query_block_size(20) == 20  # never longer than T
    assert roofline.query_block("torch-tuned", 4096, 8, 4) == 256
    assert roofline.query_block("numpy-tuned", 4096, 8, 4) == 128
