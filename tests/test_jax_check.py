"""`triptych check` on JAX targets: our backend (under jax.jit, and eagerly
for hostile magnitudes), the lesson, jax.nn.dot_product_attention and flax's
nnx.MultiHeadAttention through their signatures, their known behaviours
reported as what they are (docs/differences.md): float64 computed in
float32 (a NOTE, the other properties judged at float32's tolerance), fully
masked rows as the uniform mean (a NOTE), a NaN value that leaks (a FAIL).
Two examples per property: JAX compiles each new shape. About 40 s on
2 cores, shared."""

from __future__ import annotations

import jax
from flax import nnx

import impl_jax
from triptych.check.adapters import adapter_for
from triptych.check.properties import Settings, run_property

FEW = Settings(examples=2)


def statuses(target, ids, *, eager=False) -> dict:
    adapter = adapter_for(target)
    adapter.jit = not eager
    found = {id: run_property(adapter, FEW, id) for id in ids}
    return {id: (r.status, r.diagnosis, r.reason) for id, r in found.items()}


def test_our_jax_backend_passes_under_jit():
    ids = ["oracle:float64", "oracle:bfloat16", "causality", "mask"]
    ids += ["independence", "fully masked rows", "NaN behind the mask", "gradients"]
    found = statuses(impl_jax.multi_head_attention, ids)
    assert {status for status, *_ in found.values()} == {"PASS"}


def test_our_jax_backend_passes_hostile_magnitudes_eagerly():
    found = statuses(impl_jax.multi_head_attention, ["hostile magnitudes"], eager=True)
    assert found["hostile magnitudes"][0] == "PASS"


def test_the_jax_lesson_leaks_a_nan_behind_the_mask():
    from impl_jax import lesson

    found = statuses(lesson.multi_head_attention, ["NaN behind the mask"])
    assert found["NaN behind the mask"][0] == "FAIL"


def test_dot_product_attention_is_reported_as_what_it_is():
    ids = ["oracle:float64", "oracle:float32", "mask", "fully masked rows"]
    ids += ["NaN behind the mask"]
    found = statuses(jax.nn.dot_product_attention, ids)
    assert adapter_for(jax.nn.dot_product_attention).describe() == "qkv-thd, jax"
    assert {id: s for id, (s, *_) in found.items()} == {
        "oracle:float64": "NOTE",
        "oracle:float32": "PASS",
        "mask": "PASS",
        "fully masked rows": "NOTE",
        "NaN behind the mask": "FAIL",
    }
    assert "computes in float32 inside" in found["oracle:float64"][1]
    assert "judged at the float32 tolerance" in found["mask"][2]
    assert found["fully masked rows"][2].startswith(
        "fully masked rows give uniform over all T keys"
    )
    assert "nan value behind the causal mask" in found["NaN behind the mask"][1]


def test_flax_multi_head_attention_is_reported_as_what_it_is():
    ids = ["oracle:float64", "oracle:float32", "mask", "fully masked rows"]
    found = statuses(nnx.MultiHeadAttention, ids)
    assert {id: s for id, (s, *_) in found.items()} == {
        "oracle:float64": "NOTE",
        "oracle:float32": "PASS",
        "mask": "PASS",
        "fully masked rows": "NOTE",
    }
