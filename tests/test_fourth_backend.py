"""A fourth backend, in the tests only: the walk of docs/architecture.md
("Adding a backend") taken for real. tests/fourth_backend/impl_array_api
writes causal self-attention once more, for the array API standard
(array_api_strict); this file registers it with shared.registry.register and
nothing else does. It walks the seven steps, its lesson is its library bit
for bit, it agrees with the float64 oracle and with every other backend
within the dtype's tolerance, it raises the same bad-input messages, and
`triptych run` takes it beside NumPy: no file of triptych/, shared/ or
tools/ names it."""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import golden

from shared import PRESETS, assert_close, make_fixture, registry
from shared.registry import Arrays, Framework, Install
from shared.steps import steps_of
from triptych.cli import main

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).parent / "fourth_backend"
ARRAY_API = Framework(
    name="array_api",
    title="Array API",
    arrays=Arrays("an array API array", ("array_api_strict",)),
    install=Install(
        "array_api", ("array_api_strict",), ("array_api_strict",), ("array_api_strict",)
    ),
    color="tab:purple",
)


@pytest.fixture
def fourth(monkeypatch):
    """impl_array_api, registered for the test and gone after it."""
    monkeypatch.syspath_prepend(str(HERE))
    registry.register(ARRAY_API)
    yield importlib.import_module("impl_array_api")
    registry.unregister("array_api")
    for name in [m for m in sys.modules if m.startswith("impl_array_api")]:
        del sys.modules[name]


def arrays_of(backend, fixture, dtype):
    """x and the four weights of a float64 fixture, as the backend's, in dtype."""
    return [backend.from_numpy(a, dtype) for a in (fixture.x, *fixture.params.values())]


def test_the_lesson_walks_the_seven_steps(fourth):
    lesson = importlib.import_module("impl_array_api.lesson")
    seven = [(n, False) for n in range(1, 8)]
    steps = steps_of(lesson.single_head_attention)
    assert [(s.number, s.continued) for s in steps] == seven
    steps = steps_of(lesson.multi_head_attention)
    assert [(s.number, s.continued) for s in steps] == [*seven, (7, True)]


def test_the_lesson_is_the_library_bit_for_bit(fourth, dtype):
    lesson = importlib.import_module("impl_array_api.lesson")
    fixture = make_fixture(PRESETS["tiny"])
    x, w_q, w_k, w_v, w_o = arrays_of(fourth, fixture, dtype)
    for name, args in (
        ("single_head_attention", (x, w_q, w_k, w_v)),
        ("multi_head_attention", (x, w_q, w_k, w_v, w_o, fixture.preset.n_heads)),
    ):
        for a, b in zip(
            getattr(lesson, name)(*args), getattr(fourth, name)(*args), strict=True
        ):
            np.testing.assert_array_equal(fourth.to_numpy(a), fourth.to_numpy(b))


@pytest.mark.crosscheck  # beside every backend at once (tox -e crosscheck)
@pytest.mark.parametrize("preset", ["tiny", "full"])
def test_it_agrees_with_the_oracle_and_with_each_backend(
    fourth, backend, dtype, preset
):
    """Out, weights and entropy of one and of H heads: the fourth backend
    against the golden files (the oracle) and against `backend`, each within
    the dtype's tolerance."""
    fixture = make_fixture(PRESETS[preset])
    want = golden(preset)
    H = fixture.preset.n_heads
    found = {}
    for name, module in (("array_api", fourth), ("other", backend)):
        x, w_q, w_k, w_v, w_o = arrays_of(module, fixture, dtype)
        single = module.single_head_attention(x, w_q, w_k, w_v)
        multi = module.multi_head_attention(x, w_q, w_k, w_v, w_o, H)
        entropy = module.attention_entropy(multi[1])
        found[name] = [module.to_numpy(a) for a in (*single, *multi, entropy)]
    keys = ("single_out", "single_weights", "multi_out", "multi_weights")
    keys += ("multi_entropy",)
    for key, ours, theirs in zip(keys, found["array_api"], found["other"], strict=True):
        assert_close(ours, want[key], dtype, f"{preset} {key} against the oracle")
        assert_close(ours, theirs, dtype, f"{preset} {key} against {backend.__name__}")


def test_bad_input_is_the_same_message(fourth):
    """shared.validation's checks, and the registry's words for its arrays."""
    fixture = make_fixture(PRESETS["tiny"])
    x, w_q, w_k, w_v, w_o = arrays_of(fourth, fixture, "float64")
    with pytest.raises(ValueError) as raised:
        fourth.multi_head_attention(x, w_q, w_k, w_v, w_o, 3)
    assert str(raised.value) == "n_heads=3 does not divide d_model=32"
    stand_in = type("Tensor", (), {"__module__": "torch"})()
    with pytest.raises(TypeError) as raised:
        fourth.single_head_attention(stand_in, w_q, w_k, w_v)
    assert str(raised.value) == (
        "x is a torch tensor, but impl_array_api computes on array API arrays: "
        "convert it with impl_array_api.from_numpy(impl_torch.to_numpy(x))"
    )


def test_triptych_run_takes_it_beside_numpy(fourth, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["run", "--backends", "numpy,array_api", "--output-dir", str(out)]
    assert main([*argv, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert list(document["backends"]) == ["numpy", "array_api"]
    assert document["verdict"] == "PASS"
    assert (out / "attention_heatmaps_array_api.png").exists()


@pytest.mark.reads_source
def test_no_file_of_the_tooling_names_it():
    named = re.compile(r"array_api|Array API")
    for folder in ("triptych", "shared", "tools"):
        for path in (ROOT / folder).rglob("*.py"):
            assert not named.search(path.read_text()), path
