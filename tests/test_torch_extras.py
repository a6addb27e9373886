"""torch's additions to the lesson (impl_torch/extras.py): its fused attention
and nn.MultiheadAttention, called as a layer, equal to the lesson."""

from __future__ import annotations

import importlib

from test_extras import inputs

from shared import assert_close


def test_torchs_fused_attention_and_layer_equal_the_lesson(dtype):
    import torch

    from impl_torch import extras, lesson

    backend = importlib.import_module("impl_torch")
    x, w_q, w_k, w_v, w_o = inputs(backend, dtype)
    out, _ = lesson.single_head_attention(x, w_q, w_k, w_v)
    assert_close(extras.fused(x, w_q, w_k, w_v).numpy(), out.numpy(), dtype, "fused")
    layer = extras.as_layer(w_q, w_k, w_v, w_o, 4)
    assert isinstance(layer, torch.nn.MultiheadAttention)
    got_out, got_weights = extras.call_layer(layer, x)
    out, weights = lesson.multi_head_attention(x, w_q, w_k, w_v, w_o, 4)
    assert_close(got_out.detach().numpy(), out.numpy(), dtype, "layer out")
    assert_close(got_weights.detach().numpy(), weights.numpy(), dtype, "layer weights")


def test_a_fused_form_beyond_the_tolerance_is_shown_not_failed(monkeypatch):
    """The page's fused row is the framework's code, not ours: a miss is shown
    in its cell and leaves the build's agreement (the exit code) alone; a
    miss of our own extras fails it."""
    import impl_torch
    from impl_torch import extras, lesson
    from triptych.common import trained
    from triptych.read import lecture_views

    def off(x, w_q, w_k, w_v):
        return lesson.single_head_attention(x, w_q, w_k, w_v)[0] + 1.0

    monkeypatch.setattr(extras, "fused", off)
    notes, agrees = lecture_views.notes(
        trained.view(), {"torch": impl_torch}, "float32"
    )
    assert agrees and "BEYOND the tolerance" in notes[("fused", "fused")]
    monkeypatch.setattr(extras, "gradient", lambda *args: off(*args).sum() * 0)
    _, agrees = lecture_views.notes(trained.view(), {"torch": impl_torch}, "float32")
    assert not agrees
