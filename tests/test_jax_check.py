"""`triptych check` on JAX targets: our backend (under jax.jit), the
lesson, jax.nn.dot_product_attention and flax's nnx.MultiHeadAttention
through their signatures, their known behaviours reported as what they are
(docs/differences.md): float64 computed in float32 (a NOTE, the other
properties judged at float32's tolerance), fully masked rows as the uniform
mean and a NaN value behind the mask (NOTEs by default, a FAIL with --profile
strict); and the check's jit, XLA's backend without optimisation, computing
the bits that the default optimisation computes. Two examples per property:
JAX compiles each new shape. About 40 s on 2 busy cores."""

from __future__ import annotations

import jax
import numpy as np
from flax import nnx
from jax_helpers import xla_fuses_multiply_subtract

import impl_jax
from triptych.check.adapters import adapter_for
from triptych.check.adapters.base import JIT_OPTIONS
from triptych.check.problems import Problem
from triptych.check.properties import Settings, run_property

FEW = Settings(examples=2)


def statuses(target, ids, *, settings=FEW, eager=False) -> dict:
    adapter = adapter_for(target, eager=eager)
    found = {id: run_property(adapter, settings, id) for id in ids}
    return {id: (r.status, r.diagnosis, r.reason) for id, r in found.items()}


def test_our_jax_backend_passes_under_jit():
    ids = ["oracle:float64", "oracle:bfloat16", "causality", "mask"]
    ids += ["independence", "fully masked rows", "NaN behind the mask", "gradients"]
    ids += ["hostile magnitudes"]
    found = statuses(impl_jax.multi_head_attention, ids)
    assert {status for status, *_ in found.values()} == {"PASS"}


def test_the_check_compiles_the_bits_that_xla_optimised_computes():
    """JIT_OPTIONS (LLVM without optimisation) on our backend: the same
    bits as XLA's default in each dtype, on a block edge, at ordinary
    magnitudes (not at bfloat16's top, where --profile strict compiles with
    XLA's defaults: the next test)."""
    inputs = Problem((2,), 17, 2, 4, 3).inputs()

    def attend(x, w_q, w_k, w_v, w_o):
        return impl_jax.multi_head_attention(x, w_q, w_k, w_v, w_o, 2)

    for dtype in ("float64", "float32", "float16", "bfloat16"):
        args = [inputs.x, *inputs.w.values()]
        args = [impl_jax.from_numpy(a, dtype) for a in args]
        plain = jax.jit(attend)(*args)
        fast = jax.jit(attend, compiler_options=JIT_OPTIONS)(*args)
        for a, b in zip(plain, fast, strict=True):
            assert np.array_equal(np.asarray(a), np.asarray(b)), dtype


def test_the_jax_lesson_passes_the_course_and_leaks_a_nan_when_strict():
    from impl_jax import lesson

    ids = ["oracle:float32", "causality"]
    course = Settings(examples=2, profile="course")
    course = statuses(lesson.multi_head_attention, ids, settings=course)
    assert {status for status, *_ in course.values()} == {"PASS"}
    strict = Settings(examples=2, profile="strict")
    ids = ["NaN behind the mask"]
    found = statuses(lesson.multi_head_attention, ids, settings=strict)
    assert found["NaN behind the mask"][0] == "FAIL"


def test_dot_product_attention_is_reported_as_what_it_is():
    ids = ["oracle:float64", "oracle:float32", "mask", "fully masked rows"]
    ids += ["NaN behind the mask"]
    found = statuses(jax.nn.dot_product_attention, ids)
    adapter = adapter_for(jax.nn.dot_product_attention)
    assert adapter.describe() == "qkv-thd, jax, q (T, H, D) or (B, T, H, D)"
    assert {id: s for id, (s, *_) in found.items()} == {
        "oracle:float64": "NOTE",
        "oracle:float32": "PASS",
        "mask": "PASS",
        "fully masked rows": "NOTE",
        "NaN behind the mask": "NOTE",
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


def test_strict_compiles_as_xla_does_by_default_and_finds_its_overflow():
    """XLA's optimised code computes a step of our backend in a narrower
    range than its eager operations: NaN in bfloat16 at scores of 1e37,
    which the strict profile (XLA's defaults) finds and the default's
    unoptimised jit does not compute. Where XLA's code has no fused
    multiply-add (a CPU without FMA), there is nothing to find."""
    from triptych.check.runner import Job, make_adapter

    adapter = make_adapter(Job("impl_jax:multi_head_attention", profile="strict"))
    assert adapter.jit_options is None
    strict = Settings(dtypes=("float64", "bfloat16"), examples=6, profile="strict")
    found = run_property(adapter, strict, "hostile magnitudes")
    if not xla_fuses_multiply_subtract():
        assert found.status == "PASS", found.reason
        return
    assert found.status == "FAIL"
    assert "not finite at scores of 1e37 in bfloat16" in found.reason
