"""SIGTERM and SIGHUP stop a command as Ctrl-C does: one line on stderr, exit
code 143 (SIGTERM) or 129 (SIGHUP), every worker and rank it started ended,
no staging folder left and the output folder as it was. Each command that
starts a worker (check's target, bench --memory's point, shard's JAX child
and torch ranks) or stages files gets each signal for real, as `timeout` or
`kill` sends it, once it has shown that it started: its worker running, or
its staging folder made. NumPy (and hypothesis, for check) only; shard's
children where their framework is installed."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from triptych import cli
from triptych.common.errors import STOPPED_WORDS, Stopped, print_interrupted
from triptych.common.interrupt import stops_deferred, stops_never_lost

pytestmark = [
    pytest.mark.installed,  # the numpy and jax envs (docs/suite.md)
    pytest.mark.skipif(sys.platform != "linux", reason="reads /proc"),
]

EARLIER = "from an earlier run\n"
SIGNALS = [signal.SIGTERM, signal.SIGHUP]
WAIT_S = 120.0
"""The longest a command may take to show it started, or to end once
signalled: far beyond what it needs, on a busy machine too."""


def installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command's name, or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text.rsplit(")", 1)[1].split()


def descendants(root: int) -> set[tuple[int, str]]:
    """(pid, start time) of every process below `root`, a session of its own
    (check's worker) or a forkserver's children (shard's ranks) too."""
    parents: dict[int, list[tuple[int, str]]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None:
                parents.setdefault(int(fields[1]), []).append(
                    (int(entry.name), fields[19])
                )
    found, todo = set(), [root]
    while todo:
        for child in parents.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child[0])
    return found


def alive(process: tuple[int, str]) -> bool:
    """The process still runs (the same one: its start time too)."""
    fields = _stat(process[0])
    return fields is not None and fields[19] == process[1] and fields[0] != "Z"


TARGET = "from impl_numpy import multi_head_attention as attention\n"
WORDS = " ".join(["the"] * 600)
COMMANDS = {
    # name: (argv after triptych, what shows that it started)
    "check": (
        ["check", "target.py:attention", "--max-t", "1024", "--examples", "50"],
        "worker",
    ),
    "bench --memory": (
        ["bench", "--memory", "--modes", "numpy", "--T", "2048,4096", "--quiet"],
        "worker",
    ),
    "shard": (["shard", "--backends", "numpy", "--T", "2048", "--quiet"], "staging"),
    "shard jax": (
        ["shard", "--backends", "jax", "--T", "64", "--devices", "2", "--quiet"],
        "worker",
    ),
    "shard torch": (
        ["shard", "--backends", "torch", "--T", "64", "--devices", "2", "--quiet"],
        "worker",
    ),
    "run": (
        ["run", "--backends", "numpy", "--weights", "random", "--tokens", WORDS],
        "staging",
    ),
    "train": (["train", "--backends", "numpy", "--steps", "100000"], "staging"),
    # many repeats: a sweep of seconds ended before the signal on a fast machine
    "bench": (
        ["bench", "--modes", "numpy", "--T", "2048", "--repeats", "1000", "--quiet"],
        "staging",
    ),
}
NEEDS = {"check": "hypothesis", "shard jax": "jax", "shard torch": "torch"}


def started(process: subprocess.Popen, out: Path, sign: str, seen: set) -> bool:
    """The command shows it started: its staging folder made (and, for a
    worker, a process below it); `seen` gathers the processes below it."""
    seen |= descendants(process.pid)
    staged = any(p.name.startswith(".triptych-") for p in out.iterdir())
    return staged and (sign == "staging" or bool(seen))


@pytest.mark.parametrize("number", SIGNALS, ids=lambda s: s.name)
@pytest.mark.parametrize("name", COMMANDS)
def test_a_signal_stops_a_command_as_ctrl_c_does(name, number, tmp_path):
    if name in NEEDS and not installed(NEEDS[name]):
        pytest.skip(f"{NEEDS[name]} is not installed")
    argv, sign = COMMANDS[name]
    (tmp_path / "target.py").write_text(TARGET)
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text(EARLIER)
    # a command still running after the signal is aborted: faulthandler then
    # prints where it was on stderr, which the failure shows
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"}
    command = [sys.executable, "-m", "triptych", *argv, "--output-dir", str(out)]
    with (tmp_path / "stderr").open("w+") as stderr:
        process = subprocess.Popen(
            command, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True,
        )  # fmt: skip
        seen: set[tuple[int, str]] = set()
        try:
            deadline = time.monotonic() + WAIT_S
            while not started(process, out, sign, seen):
                assert process.poll() is None, "it ended before it was signalled"
                assert time.monotonic() < deadline, "it did not show it started"
                time.sleep(0.05)
            os.kill(process.pid, number)
            try:
                code = process.wait(timeout=WAIT_S)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGABRT)
                code = process.wait(timeout=WAIT_S)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        stderr.seek(0)
        said = stderr.read().strip()
    assert code == 128 + number, said
    last = said.splitlines()[-1]
    assert last.startswith(f"triptych {argv[0]}: {STOPPED_WORDS[number]}")
    assert sorted(p.name for p in out.iterdir()) == ["results.json"]
    assert (out / "results.json").read_text() == EARLIER
    deadline = time.monotonic() + 10  # a SIGKILL lands soon, not at once
    while any(alive(p) for p in seen) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in seen if alive(p)], "a worker outlived its command"


@pytest.fixture
def python_handles_the_stops():
    """Python's handlers as a terminal's Python has them (tox may start its
    envs with SIGINT ignored)."""
    previous = {n: signal.getsignal(n) for n in (signal.SIGINT, *SIGNALS)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for number in SIGNALS:
        signal.signal(number, signal.SIG_DFL)
    yield
    for number, handler in previous.items():
        signal.signal(number, handler)


@pytest.mark.parametrize("number", SIGNALS, ids=lambda s: s.name)
def test_within_a_command_a_signal_is_a_keyboard_interrupt(
    number, python_handles_the_stops, capsys
):
    with pytest.raises(Stopped) as stop, stops_never_lost():
        signal.raise_signal(number)
        time.sleep(10)  # never reached: the signal raises first
    assert isinstance(stop.value, KeyboardInterrupt)
    assert signal.getsignal(number) is signal.SIG_DFL  # restored
    assert print_interrupted("triptych run", stop.value) == 128 + number
    assert capsys.readouterr().err == f"triptych run: {STOPPED_WORDS[number]}\n"


def test_a_signal_ignored_at_the_start_stays_ignored(python_handles_the_stops):
    """`nohup triptych ...` ignores SIGHUP: the command must not undo that."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    with stops_never_lost():
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        signal.raise_signal(signal.SIGHUP)  # ignored: nothing happens


def test_a_deferred_signal_comes_when_the_block_ends(python_handles_the_stops):
    reached = False
    with pytest.raises(Stopped), stops_never_lost(), stops_deferred():
        signal.raise_signal(signal.SIGTERM)
        reached = True
    assert reached


def test_a_signal_inside_an_import_comes_once_the_import_has_ended(
    tmp_path, monkeypatch, python_handles_the_stops
):
    """An extension's initialisation can swallow a KeyboardInterrupt (one of
    numpy.random's did, and `triptych train` trained on): a stop that lands
    in an import is raised after it, the module imported whole."""
    (tmp_path / "slow_module.py").write_text(
        "import signal, time\n"
        "signal.raise_signal(signal.SIGTERM)\n"
        "time.sleep(0.3)  # the stop is sent again meanwhile, and deferred again\n"
        "WHOLE = True\n"
    )
    monkeypatch.syspath_prepend(tmp_path)
    with pytest.raises(Stopped) as stop, stops_never_lost():
        import slow_module

        time.sleep(10)  # never ends: the stop comes first
    assert slow_module.WHOLE
    assert stop.value.signum == signal.SIGTERM
    sys.modules.pop("slow_module")


def test_a_command_run_inside_an_import_is_stopped_at_once(
    tmp_path, monkeypatch, python_handles_the_stops
):
    """Only an import begun inside the command holds a stop back: a command
    started while its caller's module is imported stops as anywhere else."""
    (tmp_path / "caller.py").write_text(
        "import signal\n"
        "from triptych.common.interrupt import stops_never_lost\n"
        "with stops_never_lost():\n"
        "    signal.raise_signal(signal.SIGTERM)\n"
        "    REACHED = True  # never: the stop comes first\n"
    )
    monkeypatch.syspath_prepend(tmp_path)
    with pytest.raises(Stopped) as stop:
        import caller  # noqa: F401
    assert stop.traceback[-1].frame.f_globals.get("REACHED") is None
    assert "caller" not in sys.modules


def test_a_sweep_stopped_by_sigterm_says_so_and_exits_143(
    tmp_path, python_handles_the_stops, capsys, monkeypatch
):
    """In process: the first point raises SIGTERM; bench's Ctrl-C path runs."""
    import impl_numpy

    def terminated(*args, **kwargs):
        signal.raise_signal(signal.SIGTERM)

    monkeypatch.setattr(impl_numpy, "multi_head_attention", terminated)
    argv = ["bench", "--quick", "--quiet", "--modes", "numpy"]
    out = tmp_path / "out"
    assert cli.main([*argv, "--output-dir", str(out)]) == 143
    assert capsys.readouterr().err == (
        "triptych bench: terminated (SIGTERM); no row done yet\n"
    )
    assert not out.exists()


def test_a_retried_stop_is_sent_again_as_the_same_signal(python_handles_the_stops):
    """A SIGTERM raised where Python cannot raise (a __del__) comes again."""

    class TermInDel:
        def __del__(self):
            signal.raise_signal(signal.SIGTERM)

    steps = []
    with pytest.raises(Stopped) as stop, stops_never_lost():
        TermInDel()
        while len(steps) < 1000:
            time.sleep(0.01)
            steps.append(None)
    assert stop.value.signum == signal.SIGTERM
    assert len(steps) < 1000, "the SIGTERM came only after the work was done"


@pytest.mark.parametrize("number", SIGNALS, ids=lambda s: s.name)
def test_a_signal_while_the_commands_import_is_one_line_too(
    number, monkeypatch, capsys
):
    """The commands are imported as the parser is built, within the handlers:
    a signal in that third of a second is the same line and exit code as one
    later, not Python's silent default. Stands in for the signal: the first
    import raises what the handler would."""

    def signalled(name):
        raise Stopped(number)

    monkeypatch.setattr(cli.importlib, "import_module", signalled)
    assert cli.main(["check", "target.py:attention"]) == 128 + number
    said = capsys.readouterr().err.strip()
    assert said == f"triptych check: {STOPPED_WORDS[number]}", said
