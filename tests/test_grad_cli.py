"""`triptych grad`: the gradient agreement table, its exit status, and the one
line it prints when a requested backend is missing."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from helpers import gradient_tolerances

import impl_numpy
from shared import tolerance
from shared.gradients import GRAD_NAMES
from triptych.cli import main
from triptych.common.backends import installed_backends

pytestmark = pytest.mark.every_backend  # and in crosscheck, all three at once


def _table(stdout):
    """The table's data rows as lists of cells (header and rule dropped)."""
    lines = stdout.splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith("dtype"))
    header = re.split(r"\s{2,}", lines[start].strip())
    rows = [line.split() for line in lines[start + 2 :] if line.startswith("float")]
    return header, rows


def test_table_passes_for_the_selected_backends(request, capsys):
    names = list(request.config.selected_backends)
    assert main(["grad", "--backends", ",".join(names)]) == 0
    out = capsys.readouterr().out
    header, rows = _table(out)
    pairs = [f"{a}-{b}" for n, a in enumerate(names) for b in names[n + 1 :]]
    assert header[3 : 3 + len(names)] == [f"{name} vs ref" for name in names]
    assert header[3 + len(names) : 3 + len(names) + len(pairs)] == pairs
    assert len(rows) == 2 * (len(GRAD_NAMES["single"]) + len(GRAD_NAMES["multi"]))
    for row in rows:
        dtype, form, grad, *numbers, atol, rtol, result = row
        assert grad in GRAD_NAMES[form]
        assert result == "PASS"
        assert len(numbers) == len(names) + len(pairs)
        if dtype == "float64" and "numpy" in names:  # numpy's is the reference
            assert numbers[names.index("numpy")] == "ref"
            numbers[names.index("numpy")] = "0"
        assert all(float(d) >= 0 for d in numbers)  # every other cell a number
        derived = gradient_tolerances("tiny", form, dtype)[grad]  # docs/suite.md
        assert (atol, rtol) == (f"{derived.atol:g},", f"{derived.rtol:g}")
        assert derived.atol >= tolerance(dtype).atol  # the table is the floor
    assert out.rstrip().endswith(
        f"PASS: all {len(rows)} rows within their derived tolerance"
    )
    if "numpy" in names:
        assert "ref: the reference itself (NumPy's float64 backward" in out


def test_dtypes_and_preset_select_the_rows(capsys):
    assert (
        main(
            [
                "grad",
                "--backends",
                "numpy",
                "--dtypes",
                "float32",
                "--preset",
                "batched",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "preset batched: x (2, 3, 16, 32), 4 heads" in out
    _, rows = _table(out)
    assert {row[0] for row in rows} == {"float32"} and len(rows) == 9


def test_a_gradient_beyond_the_tolerance_fails_with_exit_1(monkeypatch, capsys):
    """A NumPy backward that is off by 1e-3 in d_w_o, in float32 only (the
    float64 reference stays right), must be caught."""
    real = impl_numpy.multi_head_attention_backward

    def off_in_float32(x, *args, **kwargs):
        grads = real(x, *args, **kwargs)
        if x.dtype.name == "float32":
            grads["w_o"] = grads["w_o"] + 1e-3
        return grads

    monkeypatch.setattr(impl_numpy, "multi_head_attention_backward", off_in_float32)
    assert main(["grad", "--backends", "numpy"]) == 1
    out = capsys.readouterr().out
    failed = [row for row in _table(out)[1] if row[-1] == "FAIL"]
    assert [row[:3] for row in failed] == [["float32", "multi", "w_o"]]
    assert failed[0][3] == "1.0e-03"  # numpy vs ref: the 1e-3 put there
    assert out.rstrip().endswith("FAIL: 1 of 18 rows beyond the tolerance")


def test_a_missing_backend_exits_2_with_one_line(monkeypatch, capsys):
    # None in sys.modules makes `import impl_torch` raise ImportError, as it
    # does where torch is not installed.
    monkeypatch.setitem(sys.modules, "impl_torch", None)
    assert main(["grad", "--backends", "numpy,torch"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert captured.err.startswith(
        "triptych grad: error: backend 'torch' is not installed"
    )
    assert 'pip install -c constraints.txt -e ".[torch]"' in captured.err


def test_an_unknown_backend_exits_2_with_one_line(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["grad", "--backends", "numpy,tensorflow"])
    assert stop.value.code == 2
    captured = capsys.readouterr()
    assert captured.err == (
        "triptych grad: error: argument --backends: unknown backend "
        "'tensorflow'; choose from numpy, torch, jax or all "
        "(see triptych grad --help)\n"
    )


@pytest.mark.parametrize("backends", ["all", " numpy , ", "numpy,numpy,"])
def test_backends_are_read_as_triptych_run_reads_them(backends, capsys):
    """all: every installed backend; spaces, a trailing comma and repeats are
    ignored."""
    assert main(["grad", "--backends", backends, "--dtypes", "float32"]) == 0
    header, rows = _table(capsys.readouterr().out)
    names = installed_backends() if backends == "all" else ["numpy"]
    assert header[3 : 3 + len(names)] == [f"{name} vs ref" for name in names]
    assert len(rows) == len(GRAD_NAMES["single"]) + len(GRAD_NAMES["multi"])


def test_the_module_imports_no_framework_at_the_top():
    code = (
        "import sys, argparse, triptych.grad; "
        "triptych.grad.add_parser(argparse.ArgumentParser().add_subparsers()); "
        "print(sorted({'torch', 'jax', 'matplotlib'} & set(sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
