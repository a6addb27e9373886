"""Every pair of backends agrees: weights, outputs and entropy, on every preset,
in float64 and float32, within the tolerance table."""

from __future__ import annotations

import pytest
from helpers import golden, name_of, run_entropy, run_multi, run_single

from shared import PRESETS, assert_close


@pytest.mark.parametrize("preset", PRESETS)
def test_backends_agree_with_each_other(backend_pair, dtype, preset):
    a, b = backend_pair
    g = golden(preset)
    n_heads = PRESETS[preset].n_heads
    pair = f"{name_of(a)} vs {name_of(b)}"
    results = {}
    for backend in (a, b):
        single = run_single(backend, g["x"], g["w_q"], g["w_k"], g["w_v"], dtype)
        multi = run_multi(backend, g["x"], g, n_heads, dtype)
        results[backend] = {
            "single out": single[0],
            "single weights": single[1],
            "single entropy": run_entropy(backend, single[1], dtype),
            "multi out": multi[0],
            "multi weights": multi[1],
            "multi entropy": run_entropy(backend, multi[1], dtype),
        }
    for what, value in results[a].items():
        assert_close(value, results[b][what], dtype, f"{pair}: {what}")
