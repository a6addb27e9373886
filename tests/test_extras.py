"""What each framework adds to the lesson (impl_*/extras.py): every head at
once (NumPy's broadcasting, torch.func.vmap, jax.vmap), equal to the
multi-head lesson's heads; a gradient by hand, from torch's tape and from
jax.grad, equal to the float64 backward. torch's fused attention and layer:
tests/test_torch_extras.py; JAX's trace, jit and fused attention:
tests/test_jax_extras.py."""

from __future__ import annotations

import importlib

import numpy as np
from helpers import name_of

from shared import PRESETS, assert_close, make_fixture
from triptych.common import trained

FIXTURE = make_fixture(PRESETS["tiny"])


def inputs(backend, dtype, fixture=FIXTURE):
    arrays = (fixture.x, *fixture.params.values())
    return tuple(backend.from_numpy(a.astype(dtype)) for a in arrays)


def test_every_head_is_the_multi_head_lessons_heads(backend):
    """On the trained model's layer 1 in float32: one shape, one dtype (each
    new shape is new work for eager JAX)."""
    extras = importlib.import_module(f"impl_{name_of(backend)}.extras")
    lesson = importlib.import_module(f"impl_{name_of(backend)}.lesson")
    fixture, dtype = trained.fixture(trained.load(), 1), "float32"
    x, w_q, w_k, w_v, w_o = inputs(backend, dtype, fixture)
    H, D = fixture.preset.n_heads, fixture.preset.d_head
    out, weights = extras.every_head(x, w_q, w_k, w_v, H)
    _, expected = lesson.multi_head_attention(x, w_q, w_k, w_v, w_o, H)
    assert tuple(weights.shape) == (H, *expected.shape[-2:])
    assert_close(
        backend.to_numpy(weights), backend.to_numpy(expected), dtype, "weights"
    )
    np.testing.assert_array_equal(
        backend.to_numpy(extras.heads_of(w_q, H)[1]),
        backend.to_numpy(w_q)[:, D : 2 * D],
    )
    one, _ = lesson.single_head_attention(
        x, *(extras.heads_of(w, H)[1] for w in (w_q, w_k, w_v))
    )
    assert_close(backend.to_numpy(out[1]), backend.to_numpy(one), dtype, "out")


def test_numpy_needs_no_loop_over_heads_the_lesson_broadcasts():
    """The one-head lesson given stacked (H, C, D) weights returns every head,
    bit for bit what a Python loop over the heads returns: broadcasting does
    in NumPy what vmap does in torch and JAX (docs/reading.md)."""
    from impl_numpy import extras, lesson

    fixture = trained.fixture(trained.load(), 1)
    H = fixture.preset.n_heads
    x, w_q, w_k, w_v = fixture.x, fixture.w_q, fixture.w_k, fixture.w_v
    out, weights = extras.every_head(x, w_q, w_k, w_v, H)
    looped = [
        lesson.single_head_attention(
            x, *(extras.heads_of(w, H)[h] for w in (w_q, w_k, w_v))
        )
        for h in range(H)
    ]
    np.testing.assert_array_equal(out, np.stack([o for o, _ in looped]))
    np.testing.assert_array_equal(weights, np.stack([w for _, w in looped]))


def test_each_frameworks_gradient_equals_the_float64_backward(backend):
    """dL/dw_q for L = out.sum(): NumPy's by hand (backward.py), torch's from
    its tape, JAX's from jax.grad (one compile), each within float32's
    tolerance of the hand-written backward in float64 (the reference of
    `triptych grad`), and the caller's w_q left without a gradient."""
    from impl_numpy.backward import single_head_attention_backward

    extras = importlib.import_module(f"impl_{name_of(backend)}.extras")
    view = trained.view()
    x, head = view.fixture.x, view.single_weights()
    given = [backend.from_numpy(a, "float32") for a in (x, *head)]
    got = backend.to_numpy(extras.gradient(*given))
    T, D = x.shape[0], head[0].shape[1]
    expected = single_head_attention_backward(x, *head, np.ones((T, D)))["w_q"]
    assert got.shape == head[0].shape
    assert_close(got, expected, "float32", "dL/dw_q")
    assert getattr(given[1], "grad", None) is None
