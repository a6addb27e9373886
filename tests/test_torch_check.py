"""`triptych check` on torch targets: our backend and module, the lesson,
F.scaled_dot_product_attention and nn.MultiheadAttention through their
signatures (their known behaviours reported as what they are, as
docs/differences.md has them), a nanoGPT-style module found by its layers'
names, and a gradient cut from the graph. About 10 s on 2 cores."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

import impl_torch
from triptych.check.adapters import adapter_for
from triptych.check.properties import Settings, property_ids, run_property

FEW = Settings(examples=3)


def statuses(target, ids=None, settings=FEW) -> dict:
    adapter = adapter_for(target)
    found = {
        id: run_property(adapter, settings, id) for id in ids or property_ids(settings)
    }
    return {id: (r.status, r.diagnosis) for id, r in found.items()}


def test_our_torch_backend_passes_every_property_gradients_included():
    found = statuses(impl_torch.multi_head_attention)
    assert {status for status, _ in found.values()} == {"PASS"}


def test_our_torch_module_passes_through_from_weights():
    ids = ["oracle:float32", "mask", "fully masked rows", "gradients"]
    found = statuses(impl_torch.CausalSelfAttention, ids)
    assert {status for status, _ in found.values()} == {"PASS"}


def test_the_torch_lesson_leaks_a_nan_behind_the_mask():
    from impl_torch import lesson

    found = statuses(
        lesson.single_head_attention, ["oracle:float32", "NaN behind the mask"]
    )
    assert found["oracle:float32"][0] == "PASS"
    assert found["NaN behind the mask"][0] == "FAIL"


def test_sdpa_passes_but_for_a_nan_value_behind_the_mask():
    ids = ["oracle:float64", "oracle:float16", "causality", "mask", "fully masked rows"]
    ids += ["rows sum to 1", "NaN behind the mask", "gradients"]
    found = statuses(F.scaled_dot_product_attention, ids)
    assert adapter_for(F.scaled_dot_product_attention).describe() == "qkv, torch"
    assert {id: s for id, (s, _) in found.items()} == {
        **dict.fromkeys(ids, "PASS"),
        "rows sum to 1": "SKIP",  # it returns no weights
        "NaN behind the mask": "FAIL",
    }
    assert found["NaN behind the mask"][1].startswith(
        "a nan value behind the causal mask reaches earlier rows: 0 * NaN = NaN"
    )


def test_nn_multihead_attention_gives_nan_for_a_fully_masked_row():
    """Its mask is read the other way (True = may NOT attend): the adapter
    turns ours over, so the mask passes; the path that returns weights
    gives NaN where no key is allowed (docs/differences.md)."""
    ids = ["oracle:float32", "rows sum to 1", "mask", "fully masked rows"]
    found = statuses(torch.nn.MultiheadAttention, ids)
    assert {id: s for id, (s, _) in found.items()} == {
        **dict.fromkeys(ids, "PASS"),
        "fully masked rows": "FAIL",
    }
    assert found["fully masked rows"][1].startswith("NaN from a fully masked row")


def test_a_module_instance_is_checked_at_its_own_widths():
    module = torch.nn.MultiheadAttention(8, 2, batch_first=False)  # with biases
    adapter = adapter_for(module)
    assert adapter.fixed == (8, 2)
    result = run_property(adapter, FEW, "oracle:float64")
    assert result.status == "PASS", result.reason


class NanoGPTAttention(torch.nn.Module):
    """As nanoGPT writes it: q, k, v packed in c_attn, the output c_proj."""

    def __init__(self, n_embd, n_head):
        super().__init__()
        self.c_attn = torch.nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = torch.nn.Linear(n_embd, n_embd)
        self.n_head = n_head

    def forward(self, x):
        *B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=-1)
        q, k, v = (t.view(*B, T, self.n_head, -1).transpose(-3, -2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(-3, -2).reshape(*B, T, C))


def test_a_module_is_found_by_its_layers_names():
    found = statuses(NanoGPTAttention, ["oracle:float64", "independence", "gradients"])
    assert {status for status, _ in found.values()} == {"PASS"}
    assert (
        adapter_for(NanoGPTAttention).describe() == "module (NanoGPTAttention), torch"
    )


def detached_softmax(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """Right numbers, but the weights are cut from the graph."""
    *B, T, C = x.shape
    q, k, v = (
        (x @ w).view(*B, T, n_heads, C // n_heads).transpose(-3, -2)
        for w in (w_q, w_k, w_v)
    )
    scores = q @ k.transpose(-1, -2) / math.sqrt(C // n_heads)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    weights = torch.softmax(scores.masked_fill(~causal, -math.inf), dim=-1).detach()
    out = (weights @ v).transpose(-3, -2).reshape(*B, T, C)
    return out @ w_o, weights


def test_a_gradient_cut_from_the_graph_is_caught():
    found = statuses(detached_softmax, ["oracle:float64", "gradients"])
    assert found["oracle:float64"][0] == "PASS"
    assert found["gradients"][0] == "FAIL"
    assert found["gradients"][1].startswith("no gradient reaches w_q and w_k")
