"""Chapter 0 of the page, the build-up (impl_*/buildup.py): in every framework
stages 1 to 3 give the same average, 4 and 5 each change it, 6, the lesson's
one head, is stage 5, and 7, the earlier tokens reversed, leaves the last
token's output where it was; each stage is within the tolerance of its
float64 oracle, on the page's model and sentence (triptych.read.lecture
measures the same when the page is built; tests/test_read_lecture_page.py
checks what the page shows)."""

from __future__ import annotations

import functools

import numpy as np
from helpers import name_of

from shared import assert_close
from triptych.common import backends, trained
from triptych.read import lecture


@functools.cache
def oracles() -> dict:
    return lecture.oracles(trained.view(), backends.load_backend)


def test_each_stage_equals_the_one_before_and_its_oracle(backend, dtype):
    """One shape, the page's (eager JAX compiles each new shape); in float64
    too, where a weight made in float32 and cast would show (torch's default
    dtype for a bool divided by an int)."""
    view, name = trained.view(), name_of(backend)
    given = lecture.inputs(backend, view, dtype)
    stages = lecture.module(name, "buildup")
    out = {
        stage: np.asarray(
            backend.to_numpy(getattr(stages, stage)(given.x, *given.head))
        )
        for stage in lecture.STAGES
    }
    expected = oracles()
    for stage, value in out.items():
        assert value.dtype == dtype, stage  # no stage widens or narrows it
        assert_close(value, expected[lecture.ORACLE_OF[stage]], dtype, stage)
    for before, stage in zip(lecture.STAGES, lecture.STAGES[1:], strict=False):
        previous = out[before][-len(out[stage]) :]  # 7: stage 6's last row
        same = np.allclose(out[stage], previous, rtol=1e-5, atol=1e-5)
        if dtype == "float64" and stage in lecture.SAME:
            np.testing.assert_allclose(out[stage], previous, rtol=1e-12, atol=1e-12)
        assert same == (stage in lecture.SAME), (before, stage)
    lesson = lecture.module(name, "lesson")
    one, _ = lesson.single_head_attention(given.x, *given.head)
    np.testing.assert_array_equal(out["one_head"], backend.to_numpy(one))
    assert out["reversed_past"].shape == (1, one.shape[-1])
    order = [*range(len(view.labels) - 2, -1, -1), len(view.labels) - 1]
    others, _ = lesson.single_head_attention(
        backend.from_numpy(view.fixture.x[order], dtype), *given.head
    )  # the earlier tokens see other pasts: their outputs move
    assert not np.allclose(backend.to_numpy(others)[:-1], out["one_head"][:-1][::-1])


def test_the_oracles_are_what_each_stage_means():
    """The float64 oracles, by their definitions: the average of the values
    up to each token; attention with the scores unscaled is attention with
    w_q times sqrt(D); attention is shared.reference's."""
    view = trained.view()
    expected = oracles()
    x, (w_q, w_k, w_v) = view.fixture.x, view.single_weights()
    v = x @ w_v
    T, D = v.shape
    average = np.cumsum(v, axis=0) / np.arange(1, T + 1)[:, None]
    np.testing.assert_allclose(expected["average"], average, rtol=1e-12, atol=1e-12)
    numpy = backends.load_backend("numpy")
    unscaled, _ = numpy.single_head_attention(x, w_q * np.sqrt(D), w_k, w_v)
    np.testing.assert_allclose(expected["unscaled"], unscaled, rtol=1e-9, atol=1e-9)
    assert not np.allclose(expected["unscaled"], expected["out"], atol=1e-3)


def test_the_stripe_is_the_column_after_the_last_occurrence():
    words = ["a", "b", "c", "a", "b", "a"]
    weights = np.tril(np.ones((6, 6)))
    weights[3] = np.eye(6)[1]  # row 3 ("a") attends 1 ("b"): the copy
    weights[4] = np.eye(6)[4]  # row 4 ("b") attends itself
    weights[5] = np.eye(6)[4] * 0.6 + np.eye(6)[1] * 0.4  # last "a" at 3: 4
    found = lecture.stripe(words, weights)
    assert [(s.row, s.expected, s.attended) for s in found] == [
        (3, 1, 1),
        (4, 2, 4),
        (5, 4, 4),
    ]
    assert [s.weight for s in found] == [1.0, 0.0, 0.6]
