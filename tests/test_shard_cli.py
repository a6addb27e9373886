"""`triptych shard`: the report and its files (results.json against
docs/shard.schema.json, the plot), the device counts, and every bad argument
as one line with exit code 2 before any process starts; a rank that dies is
one line and exit code 1, with no process left. Each run uses the backends
this pytest session selected, at a tiny size."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from triptych.shard import device_counts, report
from triptych.shard.torch_rank import KILL_ENV

pytestmark = pytest.mark.distributed

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((ROOT / "docs" / "shard.schema.json").read_text())
SMALL = ["--T", "40", "--d-model", "32", "--n-heads", "4", "--quiet"]


def shard(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "triptych", "shard", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def sharded_run(request, tmp_path_factory):
    """One run of both device counts 1 and 2 with the selected backends."""
    selected = ",".join(request.config.selected_backends)
    out = tmp_path_factory.mktemp("shard")
    done = shard("--devices", "2", "--backends", selected, "--key-padding",
                 "--dtype", "float64", "--output-dir", str(out), *SMALL)  # fmt: skip
    return done, out, list(request.config.selected_backends)


def test_the_report_and_results_json(sharded_run):
    done, out, selected = sharded_run
    assert done.returncode == 0, done.stderr
    document = json.loads((out / "results.json").read_text())
    jsonschema.validate(document, SCHEMA, cls=jsonschema.Draft202012Validator)
    rows = document["results"]
    assert [(r["backend"], r["devices"]) for r in rows] == [
        (b, n) for b in selected for n in (1, 2)
    ]
    assert all(r["status"] == "ok" and r["max_abs_diff"] < 1e-12 for r in rows)
    assert [r["rows_per_device"] for r in rows] == [40, 20] * len(selected)
    for row in rows:
        measured = row["backend"] != "numpy"
        assert (row["peak_bytes"] is not None) == measured
    for backend in selected:
        for N, R in ((1, 40), (2, 20)):  # its row per N: rows per device, agrees
            assert re.search(
                rf"^{backend}\s+{N}\s+{R}\s+\S+\s+YES\s", done.stdout, re.M
            )
        # its scaling lines, one per measure: "  torch peak: N^-1.00, ..."
        assert re.search(rf"^  {backend} (peak|largest): N\^", done.stdout, re.M)
    png = (out / "memory_vs_devices.png").read_bytes()
    assert png.startswith(b"\x89PNG")
    # the header says the batch as --batch does; the verdict ends it, as grad's
    assert done.stdout.startswith(
        "triptych shard: sequence strategy, T=40 C=32 H=4 batch 1 float64, key padding"
    )
    assert done.stdout.splitlines()[-1] == (
        f"PASS: all {len(rows)} runs agree with the float64 oracle within the tolerance"
    )


def test_the_verdict_names_what_did_not_agree():
    rows = [
        {"backend": "torch", "devices": 1, "status": "ok"},
        {"backend": "torch", "devices": 2, "status": "error"},
        {"backend": "jax", "devices": 1, "status": "wrong"},
    ]
    assert report.verdict_line({"results": rows}) == (
        "FAIL: 2 of 3 runs did not agree: torch on 2 devices failed; jax on 1 "
        "device disagrees"
    )


def test_one_device_is_one_device():
    from triptych.shard import launching
    from triptych.shard.problem import Problem, Run

    one = [Run("sequence", 1, Problem(T=8))]
    assert launching("torch", one) == ("torch on 1 device", "1 process in a gloo group")
    assert launching("numpy", one) == ("numpy on 1 device", None)
    two = [Run("sequence", n, Problem(T=8)) for n in (1, 2)]
    assert launching("jax", two) == (
        "jax on 1, 2 devices",
        "one child process, jax.jit compiling",
    )


def test_shards_progress_line_keeps_its_description_whole_at_80_columns():
    import io
    import re

    from rich.console import Console

    from triptych.common import status
    from triptych.shard import launching
    from triptych.shard.problem import Problem, Run

    progress = status.progress(quiet=True)  # drawn below, not live
    what, note = launching("jax", [Run("sequence", n, Problem(T=8)) for n in (1, 2, 4)])
    progress.add_task(what, total=9, note=note)
    console = Console(file=io.StringIO(), width=80, force_terminal=True)
    console.print(progress.make_tasks_table(progress.tasks))
    (line,) = re.sub(
        r"\x1b\[[0-9;?]*[a-zA-Z]", "", console.file.getvalue()
    ).splitlines()
    assert len(line) <= 80 and " jax on 1, 2, 4 devices (" in line


GLOO = (
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Read error "
    "[127.0.0.1]:{port}: Connection reset by peer. " + "More of gloo's words. " * 25
)


def test_a_failure_line_is_short_first_failed_first_and_whole_in_the_files():
    from triptych.shard.failures import failure_line

    outcomes = [
        dict(rank=0, status="error", error=GLOO.format(port=41001), ended=3.0),
        dict(rank=5, status="error", error="exit code 1", returncode=1, ended=1.0),
        dict(
            rank=1, status="error", error="killed by SIGKILL", returncode=-9, ended=1.0
        ),
        dict(rank=2, status="ok", error=None, ended=0.5),
        dict(rank=3, status="killed", error="still running; killed", ended=None),
        dict(rank=4, status="error", error=GLOO.format(port=41002), ended=2.0),
    ]
    whole = failure_line(outcomes, 6)  # rank 5 seen to end with rank 1: after it
    assert whole.startswith(
        "torch on 6 processes failed: rank 1: killed by SIGKILL; rank 5: exit code 1; "
    )
    assert GLOO.format(port=41002).strip() in whole  # every word, for the files
    short = failure_line(outcomes, 6, 60)
    assert short == (
        "torch on 6 processes failed: rank 1: killed by SIGKILL; rank 5: exit code 1; "
        "ranks 4, 0: RuntimeError: Read error: Connection reset by peer. More of…; "
        "rank 3: still running; killed"
    )


def test_a_forkserver_that_died_is_the_one_line_device_error(monkeypatch):
    """multiprocessing says EOFError when the forkserver is gone: the launch
    fails as a device does, in one line, not with a traceback."""
    pytest.importorskip("torch")
    from triptych.shard import engines
    from triptych.shard.problem import Problem, Run

    def gone(*args, **kwargs):
        raise EOFError

    monkeypatch.setattr(engines, "_fork_rank", gone)
    with pytest.raises(engines.DeviceFailureError) as failure:
        engines.launch_torch([Run("sequence", 2, Problem(T=8))], 2, rank_timeout_s=5)
    assert str(failure.value) == (
        "torch on 2 processes failed: rank 0: the forkserver that forks the ranks "
        "ended (EOFError)"
    )


def test_the_plot_is_in_mib_with_a_tick_per_device_count(monkeypatch, tmp_path):
    axes = []
    monkeypatch.setattr(
        report, "finish_line_plot", lambda fig, ax, path: axes.append(ax)
    )
    rows = [
        {"backend": "torch", "devices": n, "status": "ok", "peak_bytes": 2**24 // n,
         "largest_array_bytes": 2**22 // n**2}
        for n in (1, 2, 4, 8)
    ]  # fmt: skip
    document = {
        "results": rows,
        "config": {"strategy": "sequence", "problem": {"T": 1024, "dtype": "float32"}},
    }
    report.plot(document, tmp_path / "memory_vs_devices.png")
    (ax,) = axes
    assert ax.get_ylabel() == "MiB per device"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4", "8"]
    peak = next(line for line in ax.get_lines() if line.get_label() == "torch peak")
    assert list(peak.get_ydata()) == [16.0, 8.0, 4.0, 2.0]  # MiB, as the table


def test_the_schema_rejects_a_broken_document(sharded_run):
    _, out, _ = sharded_run
    document = json.loads((out / "results.json").read_text())
    document["results"][0]["status"] = "fine"
    with pytest.raises(jsonschema.ValidationError, match="fine"):
        jsonschema.validate(document, SCHEMA, cls=jsonschema.Draft202012Validator)
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


@pytest.mark.parametrize(
    "given, counts",
    [("8", [1, 2, 4, 8]), ("6", [1, 2, 4, 6]), ("1", [1]), ("3,1", [1, 3])],
)
def test_devices_n_means_the_powers_of_two_up_to_n(given, counts):
    assert device_counts(given) == counts


@pytest.mark.parametrize(
    "args, message",
    [
        (["--strategy", "heads", "--devices", "3", "--n-heads", "4"],
         "n_devices=3 does not divide n_heads=4; the heads strategy gives each "
         "device n_heads / n_devices whole heads"),
        (["--devices", "4", "--T", "7"],
         "the zigzag layout cuts the sequence into 2 * n_devices = 8 chunks, two "
         "per device, so it needs T >= 8; got T = 7"),
        (["--devices", "0"], "--devices must be a positive integer or a list of them, got '0'"),
        (["--n-heads", "5"], "n_heads=5 does not divide d_model=32"),
    ],
)  # fmt: skip
def test_a_bad_argument_is_one_line_and_exit_code_2(tmp_path, args, message):
    done = shard(*SMALL, "--backends", "numpy", "--output-dir", str(tmp_path), *args)
    assert done.returncode == 2
    assert done.stderr == f"triptych shard: error: {message}\n"
    assert not list(tmp_path.iterdir())


def test_more_devices_than_jax_has_is_exit_code_2(request, tmp_path):
    if "jax" not in request.config.selected_backends:
        pytest.skip("jax is not selected")
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    done = shard(*SMALL, "--backends", "jax", "--devices", "4",
                 "--output-dir", str(tmp_path), env=env)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr == (
        "triptych shard: error: n_devices=4, but JAX has 2 cpu device(s); on CPU, "
        "set XLA_FLAGS=--xla_force_host_platform_device_count=4 before JAX starts\n"
    )


def test_a_rank_that_dies_is_one_line_and_exit_code_1(request, tmp_path):
    if "torch" not in request.config.selected_backends:
        pytest.skip("torch is not selected")
    done = shard(*SMALL, "--backends", "torch", "--devices", "1,2", "--rank-timeout",
                 "20", "--output-dir", str(tmp_path), env={KILL_ENV: "1"})  # fmt: skip
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert line.startswith("triptych shard: torch on 2 processes failed: ")
    assert "rank 1: killed by SIGKILL" in line
    document = json.loads((tmp_path / "results.json").read_text())
    assert [r["status"] for r in document["results"]] == ["ok", "error"]


def test_ctrl_c_keeps_the_rows_done(monkeypatch, tmp_path, capsys):
    """Ctrl-C during the second device count: exit code 130, the first row
    kept in shard.partial.csv, nothing else written."""
    import csv

    from triptych import shard as command
    from triptych.cli import main

    calls = []

    def run_backend(backend, runs, **limits):
        calls.append(runs)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(backend, runs, **limits)

    real = command.run_backend
    monkeypatch.setattr(command, "run_backend", run_backend)
    out = tmp_path / "out"
    code = main(["shard", "--backends", "numpy", "--devices", "2", *SMALL,
                 "--output-dir", str(out)])  # fmt: skip
    assert code == 130
    partial = out / "shard.partial.csv"
    assert capsys.readouterr().err == (
        f"triptych shard: interrupted; 1 row done so far kept in {partial}\n"
    )
    with partial.open() as f:
        (row,) = csv.DictReader(f)
    assert (row["backend"], row["devices"], row["status"]) == ("numpy", "1", "ok")
    assert sorted(p.name for p in out.iterdir()) == ["shard.partial.csv"]


def test_a_terminal_sees_the_oracle_then_each_launch_named(request, tmp_path):
    """The float64 oracle's loops and each launch are named on a terminal's
    stderr as they start: an order in one stream, not a time."""
    import re

    from terminal import terminal_stderr

    backends = ",".join(request.config.selected_backends)
    argv = ["shard", "--backends", backends, "--devices", "1", "--output-dir", "out"]
    last = list(request.config.selected_backends)[-1]
    seen = terminal_stderr(
        [*argv, *SMALL[:-1]], re.compile(f"{last} on 1 device".encode()), tmp_path
    )
    oracle = seen.find(b"computing the float64 oracle (T=40")
    launch = seen.find(f"{last} on 1 device".encode())
    assert 0 <= oracle < launch, seen.decode(errors="replace")[-2000:]


def test_all_runs_what_is_installed_and_says_what_is_not(monkeypatch, tmp_path, capsys):
    """The default, --backends all, on a machine without torch and with JAX
    but not flax (hidden from the package search): NumPy runs, the report
    names the others with the command that installs them, results.json repeats
    the run with --backends numpy, and --rank-timeout says torch is missing."""
    import importlib.util

    from triptych.cli import main

    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return None if name in ("torch", "flax") else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    out = tmp_path / "out"
    code = main(["shard", "--devices", "1,2", *SMALL, "--output-dir", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert (
        'not installed, so not run: torch (pip install -c constraints.txt -e ".[torch]"), '
        'jax (pip install -c constraints.txt -e ".[jax]")'
    ) in " ".join(printed.split())
    document = json.loads((out / "results.json").read_text())
    jsonschema.validate(document, SCHEMA)
    assert document["config"]["backends"] == ["numpy"]
    assert document["config"]["not_installed"] == ["torch", "jax"]
    assert "--backends numpy " in document["command"]
    code = main(["shard", "--devices", "1", *SMALL, "--rank-timeout", "5"])
    assert code == 2
    assert capsys.readouterr().err == (
        "triptych shard: error: --rank-timeout bounds torch's collectives, and "
        "torch is not installed: drop --rank-timeout\n"
    )
