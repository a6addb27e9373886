"""`triptych check` on attention as today's model libraries write it
(tests/model_attention.py): the sizes it draws for each variant option (a
rotary width of 4 pairs, ALiBi at head counts that are not powers of two,
windows both sides of T, single heads narrower than x), one policy for the
rows a mask and a window leave empty, the float64 tolerance decided per
problem, a kernel's (B, H, T, D) output and a target's own exception read
without a crash, and diagnoses that say what the code does. NumPy only.
"""

from __future__ import annotations

import dataclasses

import model_attention as models

from triptych.check.adapters import adapter_for
from triptych.check.properties import Settings, run_property
from triptych.check.runner import last_error

FEW = Settings(examples=6)


def run(target, id, variant=None, settings=FEW, **options):
    """One property of `target`, checked in this process, told `variant`."""
    adapter = adapter_for(target, variant=variant, **options)
    return run_property(adapter, dataclasses.replace(settings, variant=variant), id)


# No crash: a kernel's (B, H, T, D), a target's own exception ------------------


def test_a_kernel_leaking_the_future_is_read_as_b_h_t_d():
    """The leak's pattern read on the kernel's own layout: no IndexError."""
    result = run(models.kernel_leaking_two, "causality")
    assert result.status == "FAIL"
    assert "future leaks at offset 2" in result.diagnosis


def test_a_target_raising_on_the_rich_problem_is_its_own_error():
    result = run(models.kernel_raising_on_six, "causality")
    assert result.status == "FAIL", result.reason


def test_the_crash_line_is_the_error_not_jax_s_note():
    stderr = (
        "Traceback (most recent call last):\n  ...\n"
        "ValueError: sequence length 6 is not supported\n"
        "--------------------\n"
        "For simplicity, JAX has removed its internal frames from the traceback "
        "of the following exception. Set JAX_TRACEBACK_FILTERING=off to include "
        "these.\n"
    )
    assert last_error(stderr) == "ValueError: sequence length 6 is not supported"
