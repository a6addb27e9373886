"""Ctrl-C in any command: one line on stderr, exit code 130, the output
directory as it was; a sweep keeps the rows it had done in a file of its own
there, and `bench --memory` leaves no process behind. NumPy only; it runs in
the numpy and jax tox envs (docs/suite.md). A Ctrl-C is simulated by raising
KeyboardInterrupt where it would land, or sent for real as SIGINT to this
process's main thread."""

from __future__ import annotations

import csv
import dataclasses
import gc
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

import impl_numpy
from triptych import cli
from triptych.bench import memory as memory_sweep
from triptych.bench import modes
from triptych.bench import report as bench_report
from triptych.bench.memory import report as memory_report
from triptych.bench.modes import attention
from triptych.common.interrupt import stops_never_lost
from triptych.run import plots

pytestmark = pytest.mark.installed  # the numpy and jax envs (docs/suite.md)

EARLIER = "from an earlier run\n"


@pytest.fixture(autouse=True)
def python_handles_ctrl_c():
    """Python's own SIGINT handler, as in a terminal: a shell that starts a
    command in the background (`cmd &`) starts it with SIGINT ignored, and
    Python then leaves it ignored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def run_cli(argv: list[str]) -> int:
    """cli.main(argv); a Ctrl-C that escapes it fails the test (rather than
    stopping pytest, which a KeyboardInterrupt would)."""
    try:
        return cli.main(argv)
    except KeyboardInterrupt:
        pytest.fail("KeyboardInterrupt escaped triptych.cli.main")


def read_csv(path: Path) -> tuple[tuple[str, ...], list[dict[str, str]]]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    return tuple(reader.fieldnames), rows


@pytest.fixture
def earlier_output(tmp_path) -> Path:
    """An output directory that holds a file of an earlier run."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text(EARLIER)
    (out / "memory.json").write_text(EARLIER)
    return out


def untouched(out: Path, *added: str) -> bool:
    """`out` holds the earlier run's files as they were, and `added` besides."""
    names = sorted(p.name for p in out.iterdir())  # no staging folder left
    earlier = [(out / n).read_text() for n in ("results.json", "memory.json")]
    return names == sorted(["results.json", "memory.json", *added]) and earlier == [
        EARLIER,
        EARLIER,
    ]


@pytest.fixture
def interrupted_at_16():
    """A NumPy mode that is interrupted (as by Ctrl-C) at T=16, its second T."""

    def build(problem):
        if problem.fixture.preset.T == 16:
            raise KeyboardInterrupt
        return attention.build_numpy(problem)

    numpy = modes.MODES["numpy"]
    modes.register(dataclasses.replace(numpy, name="numpy-interrupted", build=build))
    yield "numpy-interrupted"
    modes.unregister("numpy-interrupted")


def test_an_interrupted_bench_keeps_the_rows_done_and_nothing_else(
    earlier_output, interrupted_at_16, capsys
):
    argv = ["bench", "--quick", "--quiet", "--output-dir", str(earlier_output)]
    code = run_cli([*argv, "--modes", f"numpy,{interrupted_at_16}"])
    partial = earlier_output / bench_report.PARTIAL_FILE
    assert code == 130
    assert capsys.readouterr().err == (
        f"triptych bench: interrupted; 3 rows done so far kept in {partial}\n"
    )
    assert untouched(earlier_output, bench_report.PARTIAL_FILE)
    fields, rows = read_csv(partial)
    assert fields == bench_report.CSV_FIELDS
    assert [(r["mode"], r["T"], r["status"]) for r in rows] == [
        ("numpy", "8", "ok"),
        (interrupted_at_16, "8", "ok"),
        ("numpy", "16", "ok"),
    ]
    assert {r["dtype"] for r in rows} == {"float32"}
    # a complete run replaces the earlier files and removes the partial one
    assert run_cli([*argv, "--modes", "numpy"]) == 0
    assert not partial.exists()


def test_a_bench_interrupted_before_any_row_keeps_no_file(
    earlier_output, capsys, monkeypatch
):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(impl_numpy, "multi_head_attention", interrupted)
    argv = ["bench", "--quick", "--quiet", "--output-dir", str(earlier_output)]
    assert run_cli([*argv, "--modes", "numpy"]) == 130
    assert capsys.readouterr().err == "triptych bench: interrupted; no row done yet\n"
    assert untouched(earlier_output)


def test_an_interrupted_memory_sweep_keeps_the_rows_done(
    earlier_output, capsys, monkeypatch
):
    points = []

    def run_point(config, mode, T):
        points.append((mode, T))
        if len(points) == 3:
            raise KeyboardInterrupt
        return dict(status="ok", extra_mib=1.0)

    monkeypatch.setattr(memory_sweep, "run_point", run_point)
    argv = ["bench", "--memory", "--quick", "--quiet", "--modes", "numpy"]
    code = run_cli([*argv, "--T", "8,16,32,64", "--output-dir", str(earlier_output)])
    partial = earlier_output / memory_report.PARTIAL_FILE
    assert code == 130
    assert capsys.readouterr().err == (
        f"triptych bench: interrupted; 2 rows done so far kept in {partial}\n"
    )
    assert untouched(earlier_output, memory_report.PARTIAL_FILE)
    fields, rows = read_csv(partial)
    assert fields == memory_report.ROW_FIELDS
    assert [(r["mode"], r["T"], r["status"]) for r in rows] == [
        ("numpy", "8", "ok"),
        ("numpy", "16", "ok"),
    ]


def _gone(pid: int, within_s: float = 5.0) -> bool:
    """True once the process has ended (a zombie, dead but not reaped, has),
    waiting up to `within_s`: a SIGKILL is delivered soon, not at once."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            return True
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(sys.platform != "linux", reason="--memory reads /proc")
def test_ctrl_c_during_a_memory_point_leaves_no_process_behind(tmp_path, monkeypatch):
    """The point's child, and what it started, die with the Ctrl-C."""
    pids = tmp_path / "pids"
    (tmp_path / "sleeper.py").write_text(
        "import os, subprocess, sys, time\n"
        "grandchild = subprocess.Popen([sys.executable, '-c', "
        "'import time; time.sleep(60)'])\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{grandchild.pid}}')\n"
        "time.sleep(60)\n"
    )
    monkeypatch.setattr(memory_sweep, "CHILD_MODULE", "sleeper")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    argv = ["bench", "--memory", "--quick", "--memory-timeout", "30"]
    config = memory_sweep.resolve_config(cli.build_parser().parse_args(argv))

    def ctrl_c_once_both_run():
        for _ in range(300):
            if pids.exists() and len(pids.read_text().split()) == 2:
                signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
                return
            time.sleep(0.1)

    threading.Thread(target=ctrl_c_once_both_run, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        memory_sweep.run_point(config, "numpy", 64)
    child, grandchild = map(int, pids.read_text().split())
    assert _gone(child) and _gone(grandchild)


def test_an_interrupted_run_leaves_the_output_directory_as_it_was(
    earlier_output, capsys, monkeypatch
):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(plots, "save_entropy", interrupted)
    argv = ["run", "--backends", "numpy", "--output-dir", str(earlier_output)]
    assert run_cli(argv) == 130
    assert capsys.readouterr().err == "triptych run: interrupted\n"
    assert untouched(earlier_output)


def test_an_interrupted_grad_is_one_line(capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(impl_numpy, "multi_head_attention_backward", interrupted)
    assert run_cli(["grad", "--backends", "numpy"]) == 130
    assert capsys.readouterr().err == "triptych grad: interrupted\n"


class _CtrlCInDel:
    def __del__(self):
        signal.raise_signal(signal.SIGINT)


def _ctrl_c_in_a_gc_callback():
    def callback(phase, info):
        gc.callbacks.remove(callback)
        signal.raise_signal(signal.SIGINT)

    gc.callbacks.append(callback)
    gc.collect()


def _ctrl_c_in_a_finalizer():
    _CtrlCInDel()  # dropped at once: __del__ runs here


@pytest.mark.parametrize("where", [_ctrl_c_in_a_gc_callback, _ctrl_c_in_a_finalizer])
def test_a_ctrl_c_where_python_cannot_raise_it_is_not_lost(where):
    """Python ignores an exception raised in a gc callback (JAX has one) or a
    __del__: the Ctrl-C comes again a moment later, and stops what runs then.
    The long work runs in Python steps: the resent signal can arrive during
    the collection's C code and be pending when a single time.sleep(10)
    starts, which then raised it only after its 10 s, and the test passed all
    the same. The last assert fails if the Ctrl-C comes after the work."""
    steps = []
    with pytest.raises(KeyboardInterrupt), stops_never_lost():
        where()
        while len(steps) < 1000:  # 10 s of work: the Ctrl-C must end it
            time.sleep(0.01)
            steps.append(None)
    assert len(steps) < 1000, "the Ctrl-C came only after the work was done"


def test_a_stop_during_a_frameworks_import_waits_for_its_end(tmp_path, monkeypatch):
    """A SIGTERM while a backend's module is imported is held until the import
    ends, then raised: raised inside it, it reached jaxlib's extension as it
    initialised and crashed `triptych bench` (SIGSEGV) about one time in ten.
    The module signals itself halfway; it must still run to its last line."""
    from shared import registry
    from triptych.common import backends
    from triptych.common.errors import Stopped

    (tmp_path / "halfway_signalled.py").write_text(
        "import signal\nsignal.raise_signal(signal.SIGTERM)\nWHOLE = True\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(Stopped), stops_never_lost():
        backends._import(registry.get("numpy"), "halfway_signalled")
    assert sys.modules["halfway_signalled"].WHOLE
