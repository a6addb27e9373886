"""check's target processes forked from a warm one (triptych/check/warm.py):
one warm process serves every target of a framework in a command, each
target's process runs in a session of its own, in the working directory and
with the environment of its moment; the warm process's end ends a target
still running; and without one, each target gets a fresh process as before.
Targets in NumPy: the mechanism is the same for every framework."""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import pytest

from triptych.check import warm
from triptych.cli import main

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="forks on Linux only")

TARGET = """import json, os
from impl_numpy import multi_head_attention as attention

with open(os.environ["WARM_LOG"], "a") as log:
    log.write(json.dumps([os.getpid(), os.getppid(), os.getsid(0), os.getcwd(),
                          os.environ.get("PYTEST_CURRENT_TEST")]) + "\\n")
"""


def checked_twice(tmp_path, monkeypatch, capsys) -> list[list]:
    """`triptych check` of the target twice, in two commands: what each
    target's process logged as it was imported."""
    log = tmp_path / "log.jsonl"
    (tmp_path / "target.py").write_text(TARGET)
    monkeypatch.setenv("WARM_LOG", str(log))
    monkeypatch.chdir(tmp_path)
    options = ["--properties", "oracle:float64", "--examples", "1"]
    for n in range(2):
        argv = ["check", "target.py:attention", *options, "--output-dir", f"out{n}"]
        assert main(argv) == 0, capsys.readouterr().out
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_targets_fork_from_one_warm_process_each_in_its_own_session(
    tmp_path, monkeypatch, capsys
):
    found = checked_twice(tmp_path, monkeypatch, capsys)
    assert len(found) == 2
    (pid, parent, session, cwd, test), (pid2, parent2, *_) = found
    assert parent == parent2 != os.getpid()  # one warm process, not this one
    assert pid != pid2 and session == pid  # a process and session each
    assert cwd == str(tmp_path)  # the command's working directory
    assert test == os.environ["PYTEST_CURRENT_TEST"]  # the environment of now


def test_without_a_warm_process_each_target_is_a_fresh_child(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(warm, "prepare", lambda framework, env, timeout_s: None)
    found = checked_twice(tmp_path, monkeypatch, capsys)
    assert [parent for _, parent, *_ in found] == [os.getpid()] * 2


def test_the_end_of_the_warm_process_ends_its_target(tmp_path, monkeypatch):
    """The command gone (its pipe to the warm process closed), a target that
    loops forever is killed, and the warm process ends."""
    (tmp_path / "loops.py").write_text("while True:\n    pass\n")
    monkeypatch.chdir(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    warm.prepare("numpy", env, 60)
    process = warm._warm[warm._key("numpy", env)]
    with (tmp_path / "out").open("w") as out, (tmp_path / "err").open("w") as err:
        job = json.dumps({"target": "loops.py:f"})
        target = warm.forked([job, str(tmp_path / "events")], out, err, env, "numpy")
    assert target is not None and target.poll() is None  # looping
    process.close()
    del warm._warm[warm._key("numpy", env)]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(target.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.killpg(target.pid, signal.SIGKILL)
        pytest.fail("the target outlived its warm process")
    assert process.process.poll() is not None


ENDINGS = {
    "exits.py": "import sys\nsys.exit()\n",
    "interrupted.py": "raise KeyboardInterrupt\n",
    "aborts.py": "import os\nos.abort()\n",
    "prints.py": "print('a line on stdout')\nraise ValueError('the last line')\n",
}


def test_a_target_ends_the_same_forked_or_fresh(tmp_path, monkeypatch, capsys):
    """sys.exit at import, a KeyboardInterrupt raised, os.abort, an error
    after a print: the same row either way (exit codes, signals, the last
    line of stderr)."""
    for name, text in ENDINGS.items():
        (tmp_path / name).write_text(text + "def f(q, k, v):\n    return q\n")
    monkeypatch.chdir(tmp_path)
    targets = [f"{name}:f" for name in ENDINGS]

    def errors(out: str) -> list:
        argv = ["check", *targets, "--examples", "1", "--output-dir", out]
        main(argv)
        capsys.readouterr()
        found = json.loads((tmp_path / out / "results.json").read_text())
        return [(t["status"], t["error"]) for t in found["targets"]]

    forked = errors("forked")
    monkeypatch.setattr(warm, "prepare", lambda framework, env, timeout_s: None)
    assert forked == errors("fresh")
    assert "crashed (SIGABRT)" in forked[2][1] and "the last line" in forked[3][1]
