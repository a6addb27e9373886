"""`triptych bench --memory`: each point measured in a child process, the files,
the skip rule for T² modes, the slopes and ratios, and bad arguments. NumPy
modes only; it runs in the numpy and jax tox envs (docs/suite.md); no test
reads a memory figure's size beyond its sign."""

from __future__ import annotations

import csv
import json
import math
import re

import pytest

from triptych import cli
from triptych.bench import memory
from triptych.bench.memory import probe
from triptych.bench.memory import report as memory_report

pytestmark = pytest.mark.installed  # the numpy and jax envs (docs/suite.md)


def run_memory(tmp_path, *argv) -> tuple[int, dict]:
    out = tmp_path / "memory"
    code = cli.main(
        ["bench", "--memory", "--quick", "--quiet", "--output-dir", str(out), *argv]
    )
    report = json.loads((out / "memory.json").read_text())
    return code, report


def test_quick_memory_run_writes_every_file_with_a_row_per_point(
    tmp_path, monkeypatch, capsys
):
    code, report = run_memory(tmp_path, "--modes", "numpy,numpy-blockwise")
    assert code == 0
    printed = capsys.readouterr().out  # piped: memory.md, then the files
    assert printed.startswith((tmp_path / "memory" / "memory.md").read_text())
    # a terminal of 80 columns: tables fitted, prose wrapped, as elsewhere
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("NO_COLOR", "1")
    memory_report.print_report(report)
    text = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "numpy-blockwise / numpy" in text and "| T |" not in text
    assert "its largest 2 T" in text  # --quick's T = 64, 128
    out = tmp_path / "memory"
    for name in memory_report.FILES:
        assert (out / name).exists(), name
    assert (out / "memory_vs_T.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert report["schema"] == memory_report.SCHEMA
    assert report["config"]["T"] == list(memory.QUICK_T)
    assert "--memory" in report["command"]
    limit = report["config"]["memory_limit_gib"]
    assert (
        f"a quarter of {limit:.3g} GiB (--memory-limit-gib"
        in (out / "memory.md").read_text()
    )
    rows = report["results"]
    assert len(rows) == len(memory.QUICK_T) * 2
    for row in rows:
        assert tuple(row) == memory_report.ROW_FIELDS
        assert row["status"] == "ok", row
        assert row["extra_mib"] >= 0 and row["first_call_extra_mib"] >= 0
        assert row["baseline_mib"] > 0 and row["peak_rss_gib"] > 0
        assert row["call_s"] > 0
        assert row["linear_memory"] == (row["mode"] == "numpy-blockwise")
    pairs = {(r["blockwise"], r["naive"], r["T"]) for r in report["ratios"]}
    assert pairs == {("numpy-blockwise", "numpy", T) for T in memory.QUICK_T}
    with (out / "memory.csv").open() as f:
        assert len(list(csv.DictReader(f))) == len(rows)
    assert "numpy-blockwise / numpy" in (out / "memory.md").read_text()


def test_a_quadratic_mode_is_skipped_where_its_weights_would_not_fit(tmp_path):
    # 4 heads x 128 x 128 float32 = 256 KiB: over a quarter of 0.0005 GiB
    code, report = run_memory(
        tmp_path, "--modes", "numpy,numpy-blockwise", "--memory-limit-gib", "0.0005"
    )
    assert code == 0
    status = {(r["mode"], r["T"]): r for r in report["results"]}
    assert status[("numpy", 64)]["status"] == "ok"  # 64 KiB fits
    skipped = status[("numpy", 128)]
    assert skipped["status"] == "skipped"
    assert "one (B, H, T, T) array alone is" in skipped["reason"]
    assert skipped["extra_mib"] is None
    assert status[("numpy-blockwise", 128)]["status"] == "ok"


def test_slopes_and_ratios_of_known_curves():
    rows = []
    for T in (256, 512, 1024, 2048):
        for mode, extra in (("numpy", 3e-6 * T * T), ("numpy-blockwise", 0.01 * T)):
            rows.append(dict(mode=mode, T=T, status="ok", extra_mib=extra))
    slopes = memory.slopes(rows)
    assert math.isclose(slopes["numpy"], 2.0) and math.isclose(
        slopes["numpy-blockwise"], 1.0
    )
    (at_2048,) = [r for r in memory.ratios(rows) if r["T"] == 2048]
    assert math.isclose(at_2048["ratio"], 0.01 * 2048 / (3e-6 * 2048**2))


def test_the_child_runs_this_package_not_one_in_the_working_directory(
    tmp_path, monkeypatch
):
    """`python -m` puts the working directory first on sys.path: a triptych/
    there (a source checkout beside an installed copy) must not be measured."""
    decoy = tmp_path / "triptych" / "bench" / "memory"
    decoy.mkdir(parents=True)
    for package in (decoy, decoy.parent, decoy.parent.parent):
        (package / "__init__.py").write_text("")
    fields = json.dumps({"status": "error", "reason": "the decoy ran"})
    (decoy / "__main__.py").write_text(f"print({probe.CHILD_MARK + fields!r})\n")
    monkeypatch.chdir(tmp_path)
    args = cli.build_parser().parse_args(["bench", "--memory", "--quick"])
    point = memory.run_point(memory.resolve_config(args), "numpy", 64)
    assert point["status"] == "ok", point


def test_the_memory_limit_defaults_to_this_machines_memory():
    """Not a number fitted to one machine: the kernel's MemTotal, which leaves
    out only what the kernel reserved at boot (a few percent at most)."""
    args = cli.build_parser().parse_args(["bench", "--memory", "--quick"])
    limit = memory.resolve_config(args).memory_limit_gib
    with open("/proc/meminfo") as meminfo:
        kib = next(
            int(line.split()[1]) for line in meminfo if line.startswith("MemTotal:")
        )
    assert kib / 2**20 <= limit <= 1.1 * kib / 2**20
    given = ["bench", "--memory", "--quick", "--memory-limit-gib", "1.5"]
    assert (
        memory.resolve_config(cli.build_parser().parse_args(given)).memory_limit_gib
        == 1.5
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--device", "cuda"], "--memory measures CPU memory; leave out --device cuda"),
        (
            ["--d-model", "30", "--n-heads", "4"],
            "--n-heads 4 does not divide --d-model 30",
        ),
        (
            ["--memory-limit-gib", "0"],
            "--memory-limit-gib and --memory-timeout must be positive",
        ),
    ],
)
def test_bad_memory_arguments_exit_2(tmp_path, capsys, argv, message):
    code = cli.main(["bench", "--memory", "--output-dir", str(tmp_path), *argv])
    assert code == 2
    assert capsys.readouterr().err.strip() == f"triptych bench: error: {message}"
