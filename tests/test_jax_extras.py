"""JAX's additions to the lesson (impl_jax/extras.py): the trace it compiles
(make_jaxpr) and the lesson under jax.jit, equal to the lesson."""

from __future__ import annotations

import importlib

import numpy as np
from test_extras import inputs

from shared import assert_close


def test_jaxs_trace_and_compiled_lesson():
    import jax

    from impl_jax import extras, lesson

    backend = importlib.import_module("impl_jax")
    x, w_q, w_k, w_v, _ = inputs(backend, "float32")
    jaxpr = extras.trace(x, w_q, w_k, w_v)
    names = [e.primitive.name for e in jaxpr.jaxpr.eqns]
    assert names.count("dot_general") == 5  # q, k, v, scores, out
    assert {"exp", "reduce_max", "reduce_sum", "div"} <= set(names)
    assert str(jaxpr).startswith("{ lambda ")
    compiled = extras.compiled()
    assert isinstance(compiled, jax.stages.Wrapped)
    got = compiled(x, w_q, w_k, w_v)
    expected = lesson.single_head_attention(x, w_q, w_k, w_v)
    for a, b in zip(got, expected, strict=True):
        assert_close(np.asarray(a), np.asarray(b), "float32", "jitted")


def test_jaxs_fused_attention_equals_the_lesson():
    """jax.nn.dot_product_attention on one head, as the page's lesson
    chapter ends (one compile)."""
    from impl_jax import extras, lesson

    backend = importlib.import_module("impl_jax")
    x, w_q, w_k, w_v, _ = inputs(backend, "float32")
    out, _ = lesson.single_head_attention(x, w_q, w_k, w_v)
    got = extras.fused(x, w_q, w_k, w_v)
    assert got.shape == out.shape
    assert_close(np.asarray(got), np.asarray(out), "float32", "fused")


def test_n_heads_is_static_under_jit():
    """compiled_heads takes n_heads as a static argument: the multi-head
    lesson compiled, equal to it (one compile)."""
    from impl_jax import extras, lesson

    backend = importlib.import_module("impl_jax")
    x, w_q, w_k, w_v, w_o = inputs(backend, "float32")
    got = extras.compiled_heads()(x, w_q, w_k, w_v, w_o, n_heads=4)
    expected = lesson.multi_head_attention(x, w_q, w_k, w_v, w_o, 4)
    for a, b in zip(got, expected, strict=True):
        assert_close(np.asarray(a), np.asarray(b), "float32", "n_heads static")
