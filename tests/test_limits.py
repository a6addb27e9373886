"""Sizes that cannot fit are refused before any work, in one line with exit
code 2, naming the size asked, the memory it needs (or the time the float64
oracle's loops would take) and the option to change: every command, every
size option (`triptych.common.limits`). And a failed command, bad arguments
included, leaves the output folder exactly as it was. NumPy only."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from triptych import cli
from triptych.common import limits
from triptych.common.files import StagedDirectory

pytestmark = pytest.mark.installed  # the numpy and jax envs (docs/suite.md)

HUGE = "10000000"
WORDS = " ".join(["the"] * 40_000)
SIZES = [
    # (argv, the option named)
    (["run", "--d-model", HUGE], "--d-model"),
    (["run", "--weights", "random", "--tokens", WORDS], "--tokens"),
    (["run", "--d-model", "1000000", "--n-heads", "1000000"], "--d-model"),
    (["train", "--seq-len", HUGE, "--vocab", "5000000"], "--seq-len"),
    (["train", "--vocab", "100000000"], "--vocab"),
    (["train", "--d-model", "1000000"], "--d-model"),
    (["train", "--batch", HUGE], "--batch"),
    (["train", "--n-layers", HUGE], "--n-layers"),
    (["train", "--n-heads", "1000000", "--d-model", "1000000"], "--d-model"),
    (["bench", "--T", HUGE, "--modes", "numpy"], "--T"),
    (["bench", "--d-model", HUGE, "--modes", "numpy"], "--d-model"),
    (["bench", "--batch", HUGE, "--modes", "numpy"], "--batch"),
    (["bench", "--n-heads", HUGE, "--d-model", HUGE, "--modes", "numpy"], "--d-model"),
    (["bench", "--gemm-size", HUGE, "--modes", "numpy"], "--gemm-size"),
    (["bench", "--memory", "--T", "100000000", "--modes", "numpy"], "--T"),
    (["bench", "--scaling", "--T", "100000000", "--modes", "numpy-blockwise"], "--T"),
    (["check", "t.py:attention", "--max-t", HUGE], "--max-t"),
    (["shard", "--backends", "numpy", "--T", HUGE], "--T"),
    (["shard", "--backends", "numpy", "--d-model", HUGE, "--n-heads", "1"], "--d-model"),
    (["shard", "--backends", "numpy", "--batch", "1000000"], "--batch"),
    (["shard", "--backends", "numpy", "--n-heads", "4096", "--d-model", "4096"],
     "--n-heads"),
]  # fmt: skip
AVAILABLE = 16 * 2**30
"""The memory these tests give the machine, so that what they read does not
depend on it: every size above needs far more."""


@pytest.fixture
def target(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text(
        "from impl_numpy import multi_head_attention as attention\n"
    )
    return tmp_path


def refusal(argv, out: Path, capsys) -> str:
    """The one line of a refusal; the output folder never made."""
    code = cli.main([*argv, "--output-dir", str(out)])
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert captured.out == ""
    assert not out.exists(), "it began the work before it refused"
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "option"), SIZES, ids=[f"{a[0]} {o}" for a, o in SIZES]
)
def test_a_size_that_cannot_fit_is_refused_at_once(
    argv, option, target, capsys, monkeypatch
):
    monkeypatch.setattr(limits, "available_bytes", lambda: AVAILABLE)
    line = refusal(argv, target / "out", capsys)
    value = argv[argv.index(option) + 1] if option in argv else None
    asked = f"{option} {value}" if value != WORDS else f"{option} (40000 tokens)"
    assert line.startswith(f"triptych {argv[0]}: error: {asked}")
    assert re.search(r"needs? [\d.]+ [KMGTP]iB of memory \(", line)
    assert "this machine has 16 GiB available" in line
    assert line.endswith(f"give a smaller {option}")


TIMES = [
    (["shard", "--backends", "numpy", "--T", "200000", "--n-heads", "1",
      "--d-model", "8"], "--T", "900 s"),
    (["check", "t.py:attention", "--max-t", "200000", "--timeout", "60"],
     "--max-t", "60 s (--timeout)"),
    (["run", "--weights", "random", "--tokens", " ".join(["the"] * 200_000),
      "--d-model", "8", "--n-heads", "1"], "--tokens", "900 s"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "option", "limit"), TIMES, ids=[f"{a[0]} {o}" for a, o, _ in TIMES]
)
def test_an_oracle_that_would_not_end_in_time_is_refused(
    argv, option, limit, target, capsys, monkeypatch
):
    """Memory enough for anything: the oracle's loops, timed on a tiny
    problem, refuse it. 2e10 (query, key) pairs, each more than 45 ns of
    Python on any machine."""
    monkeypatch.setattr(limits, "available_bytes", lambda: 2**80)
    line = refusal(argv, target / "out", capsys)
    assert f"{option} " in line
    assert re.search(
        r"oracle's loops would take about [\d.]+ (minutes|hours|days)", line
    )
    assert f"over the {limit} a run may take: give a smaller {option}" in line


def test_the_available_memory_is_read_from_the_os(tmp_path, monkeypatch):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 4000 kB\nMemAvailable:    1234 kB\n")
    monkeypatch.setattr(limits, "MEMINFO", str(meminfo))
    assert limits.available_bytes() == 1234 * 1024
    monkeypatch.setattr(limits, "MEMINFO", str(tmp_path / "none"))  # not Linux
    assert 0 < limits.available_bytes() < 2**80  # os.sysconf's free pages


def test_a_size_that_fits_is_not_refused(monkeypatch):
    monkeypatch.setattr(limits, "available_bytes", lambda: 900)
    limits.refuse_unless_fits([limits.Array("x", (10, 10), 8, ("--T",))], {"--T": 10})
    with pytest.raises(limits.TooLargeError, match=r"^--T 11 needs 968 bytes"):
        limits.refuse_unless_fits(
            [limits.Array("x", (11, 11), 8, ("--T",))], {"--T": 11}
        )


# A failed command leaves the output folder exactly as it was -----------------


def snapshot(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


CHECK = ["check", "t.py:attention", "--examples", "1", "--properties", "causality"]
CHECK_FAILURES = [
    ["check", "broken/offbyon.py:attention"],  # no such file
    ["check", "t.py:attentoin"],  # no such function: exit 2 from the worker
    ["check", "t.py:attention", "--max-t", "1"],  # a bad option
    ["check", "t.py:attention", "--max-t", HUGE],  # a size that cannot fit
    ["check", "t.py:attention", "--properties", "nothing"],
    ["check", "t.py:attention", "missing.py:attention"],  # refused before any
    ["check", "t.py:attention", "t.py:attentoin", "--grade"],  # 2, one checked
]


def run_main(argv) -> int:
    try:
        return cli.main(argv)
    except SystemExit as exit:  # argparse's errors
        return exit.code


def test_a_failed_check_leaves_the_output_folder_as_it_was(target, capsys):
    out = target / "out"
    assert run_main([*CHECK, "--grade", "--output-dir", str(out)]) == 0
    before = snapshot(out)
    assert set(before) == {"results.json", "report.md", "grade.csv", "grade.md"}
    for argv in CHECK_FAILURES[:-1]:
        assert run_main([*argv, "--output-dir", str(out)]) == 2, argv
        assert snapshot(out) == before, argv
        assert sorted(p.name for p in out.iterdir()) == sorted(before), argv
    capsys.readouterr()
    # a target checked beside one that cannot be: its results are written, and
    # the other's row says why
    assert run_main([*CHECK_FAILURES[-1], "--output-dir", str(out)]) == 2
    assert snapshot(out) != before


RUN = ["run", "--backends", "numpy", "--quiet"]
RUN_FAILURES = [
    ["run", "--backends", "numpy", "--d-model", HUGE],
    ["run", "--backends", "numpy", "--weights", "random", "--layer", "0"],
    ["run", "--backends", "numpy", "--dtype", "float8"],
    ["run", "--backends", "numpy", "--tokens", "zebra"],
]


def test_a_failed_run_leaves_the_output_folder_as_it_was(target, capsys):
    out = target / "out"
    assert run_main([*RUN, "--output-dir", str(out)]) == 0
    before = snapshot(out)
    for argv in RUN_FAILURES:
        assert run_main([*argv, "--output-dir", str(out)]) == 2, argv
        assert snapshot(out) == before, argv
        assert sorted(p.name for p in out.iterdir()) == sorted(before), argv


def test_a_failure_removes_the_folders_staging_made(tmp_path):
    out = tmp_path / "a" / "b" / "out"
    with pytest.raises(RuntimeError), StagedDirectory(out, "run") as staging:
        assert staging.path.parent == out.parent
        raise RuntimeError("a failure")
    assert list(tmp_path.iterdir()) == []
