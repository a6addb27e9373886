"""Our torch attention against torch's own: F.scaled_dot_product_attention,
nn.MultiheadAttention (loaded through the layout converters) and torch.compile."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from helpers import PARAM_NAMES, golden, run_multi
from torch_helpers import torch_multihead_attention

import impl_torch
from shared import assert_close
from shared.layout import from_torch_in_proj, from_torch_linear


def _params(preset, dtype):
    g = golden(preset)
    x = g["x"].reshape(-1, *g["x"].shape[-2:])  # torch's kernels take one batch axis
    return x.astype(dtype), {k: g[k].astype(dtype) for k in PARAM_NAMES}


def test_sdpa_is_causal_equals_ours(dtype):
    for preset, H in (("tiny", 4), ("batched", 4), ("long", 4)):
        x, p = _params(preset, dtype)
        ours, _ = run_multi(impl_torch, x, p, H, dtype)
        x_t, w = torch.from_numpy(x), {k: torch.from_numpy(v) for k, v in p.items()}
        B, T, C = x_t.shape
        q, k, v = (
            (x_t @ w[n]).view(B, T, H, C // H).transpose(1, 2)
            for n in ("w_q", "w_k", "w_v")
        )
        fused = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, D)
        fused = fused.transpose(1, 2).reshape(B, T, C) @ w["w_o"]
        assert_close(ours, fused.numpy(), dtype, f"sdpa on {preset}")


def test_nn_multihead_attention_equals_ours_weights_included(dtype):
    x, p = _params("batched", dtype)
    H, T = 4, x.shape[-2]
    mha = torch_multihead_attention(p, H, dtype)
    not_allowed = ~impl_torch.causal_mask(T)  # nn.MultiheadAttention: True = may NOT
    x_t = torch.from_numpy(x)
    with torch.no_grad():
        out, weights = mha(
            x_t, x_t, x_t, attn_mask=not_allowed, average_attn_weights=False
        )
    ours_out, ours_weights = run_multi(impl_torch, x, p, H, dtype)
    assert_close(ours_weights, weights.numpy(), dtype, "nn.MultiheadAttention weights")
    assert_close(ours_out, out.numpy(), dtype, "nn.MultiheadAttention out")
    # and the converters read the same numbers back, exactly
    back = from_torch_in_proj(mha.in_proj_weight.detach().numpy())
    for name, w in zip(("w_q", "w_k", "w_v"), back, strict=True):
        np.testing.assert_array_equal(w, p[name])
    np.testing.assert_array_equal(
        from_torch_linear(mha.out_proj.weight.detach().numpy()), p["w_o"]
    )


def test_module_weights_round_trip_exactly(dtype):
    g = golden("tiny")
    module = impl_torch.CausalSelfAttention.from_weights(
        *(g[k].astype(dtype) for k in PARAM_NAMES), 4
    )
    linears = (module.q_proj, module.k_proj, module.v_proj, module.out_proj)
    for linear, name in zip(linears, PARAM_NAMES, strict=True):
        np.testing.assert_array_equal(
            from_torch_linear(linear.weight.detach().numpy()), g[name].astype(dtype)
        )


def test_torch_compile_equals_eager():
    g = golden("tiny")
    args = [torch.from_numpy(g[k].astype(np.float32)) for k in ("x", *PARAM_NAMES)]
    compiled = torch.compile(impl_torch.multi_head_attention, fullgraph=True)
    out, weights = compiled(*args, 4)
    eager_out, eager_weights = impl_torch.multi_head_attention(*args, 4)
    assert_close(out.numpy(), eager_out.numpy(), "float32", "compiled out")
    assert_close(weights.numpy(), eager_weights.numpy(), "float32", "compiled weights")


def test_runs_on_the_device_of_its_input():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    g = golden("tiny")
    args = [
        torch.from_numpy(g[k].astype(np.float32)).to(device)
        for k in ("x", *PARAM_NAMES)
    ]
    out, weights = impl_torch.multi_head_attention(*args, 4)
    assert out.device.type == weights.device.type == device
    assert_close(out.cpu().numpy(), g["multi_out"], "float32", f"out on {device}")
