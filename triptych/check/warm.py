"""Each target's process forked from a warm one, where the system allows it.

`python -P -m triptych.check JOB EVENTS` imports, for every target, what a
check needs before the target's own code: NumPy, hypothesis, this package and
the target's framework, about 0.3 s with NumPy, 1 s with torch and 1.3 s with
JAX and flax on this project's 2-core machine, most of what checking a small
function takes. On Linux a warm process, one per framework and environment
for the life of the command (every file of a `--grade` folder, every answer
exercises/grade.py grades), imports them once and forks the process of each
target; that process then runs `child_main` as `python -m triptych.check`
would: in a session of its own, in the working directory and with the
environment of the moment, stdin empty and its output in the files given, so
that a target that loops, crashes or exits still ends its own process only,
and each target is imported afresh. The command gets a `Forked`, which
answers as `subprocess.Popen` does. Elsewhere (macOS forks badly once a
framework is loaded, Windows cannot fork), or if the warm process cannot
start or has died, the target gets its own `python -m triptych.check`.

Run as `python -P -m triptych.check.warm FRAMEWORK`, this module is the warm
process: it reads one request a line on stdin, answers the pid and then the
exit code on stdout, and ends with its stdin, killing a target still running.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import re
import runpy
import select
import signal
import subprocess
import sys
import traceback
from pathlib import Path

CHILD_MODULE = "triptych.check"
"""What a target's process runs: `python -P -m triptych.check JOB EVENTS`."""
WARM_MODULE = "triptych.check.warm"
PRELOAD = ("numpy", "hypothesis", "triptych.check.runner", "triptych.check.properties")
"""What every warm process imports, besides its framework's impl_ package."""
READY_S = 120.0
"""How long a command waits at most for a warm process to import its
modules (no longer than the target's --timeout either)."""
FORK_S = 30.0
"""How long a command waits for a warm process to fork a target."""
KEPT = 3
"""How many warm processes a command keeps (the last used): each holds a
framework's modules, hundreds of MB."""
NOT_KEYS = ("PYTEST_CURRENT_TEST", "COLUMNS", "LINES", "TPU_SKIP_MDS_QUERY")
"""Environment variables that no import reads and that change from one check
to the next (pytest names the running test, the grader sets the width, JAX
notes its first start): a warm process serves every value, and the target's
process gets the value of its moment."""

_warm: dict[tuple, Warm] = {}


def forked(argv: list[str], stdout, stderr, env: dict[str, str], framework: str):
    """The process that checks one target (`python -m triptych.check` given
    `argv`), its output into the open files `stdout` and `stderr`, forked from
    the warm process of `framework` and `env` (`prepare` it first): a
    `Forked`, or None where there is none, and the caller starts one afresh."""
    key = _key(framework, env)
    warm = _warm.get(key)
    if warm is None or not warm.alive():
        return None
    try:
        return warm.fork(argv, stdout.name, stderr.name, env)
    except (OSError, ValueError):
        _warm.pop(key).close()
        return None


def prepare(framework: str, env: dict[str, str], timeout_s: float) -> None:
    """Start the warm process of `framework` and `env` unless it runs, and
    wait until it has imported its modules (outside the moment a target's
    process starts, when stops are held back)."""
    if sys.platform != "linux":
        return
    key = _key(framework, env)
    warm = _warm.pop(key, None)
    if warm is not None and not warm.alive():
        warm = None
    if warm is None:
        mine = [k for k in _warm if k[0] == os.getpid()]
        while len(mine) >= KEPT:  # the least recently used ends
            _warm.pop(mine.pop(0)).close()
        with contextlib.suppress(OSError, ValueError):
            warm = Warm(framework, env, min(READY_S, timeout_s))
    if warm is not None:
        _warm[key] = warm  # the most recently used, last


def _key(framework: str, env: dict[str, str]) -> tuple:
    # this process's own: a copy forked from it (a rank, a worker) starts its
    # own rather than write into pipes its parent reads
    kept = sorted((k, v) for k, v in env.items() if k not in NOT_KEYS)
    return os.getpid(), framework, tuple(kept)


class Warm:
    """A warm process, from the command's side."""

    def __init__(self, framework: str, env: dict[str, str], ready_s: float):
        self.process = subprocess.Popen(
            [sys.executable, "-P", "-m", WARM_MODULE, framework],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, env=env, start_new_session=True,
        )  # fmt: skip
        self.lines = Lines(self.process.stdout.fileno())
        try:
            ready = self.lines.read(ready_s)
        except BaseException:  # a stop, or an answer that is not JSON
            self.close()
            raise
        if ready != {"ready": True}:
            self.close()
            raise ValueError(f"the warm process answered {ready}")

    def alive(self) -> bool:
        return self.process.poll() is None

    def fork(self, argv: list[str], stdout: str, stderr: str, env) -> Forked:
        request = {
            "argv": argv,
            "stdout": stdout,
            "stderr": stderr,
            "cwd": os.getcwd(),
            "env": env,
        }
        self.process.stdin.write(json.dumps(request).encode() + b"\n")
        self.process.stdin.flush()
        answer = self.lines.read(FORK_S)
        if not answer or "pid" not in answer:
            raise ValueError(f"the warm process answered {answer}")
        return Forked(self, answer["pid"])

    def close(self) -> None:
        """End it: it ends with its stdin (and kills a target still running)."""
        with contextlib.suppress(OSError):
            self.process.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(1)
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


class Forked:
    """One target's process forked by a warm one: `pid`, `poll`, `wait` and
    `returncode` as `subprocess.Popen` has them (its pid is its session's)."""

    def __init__(self, warm: Warm, pid: int):
        self.warm, self.pid, self.returncode = warm, pid, None

    def poll(self) -> int | None:
        return self._reap(0.0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._reap(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(WARM_MODULE, timeout)
        return code

    def _reap(self, timeout: float | None) -> int | None:
        if self.returncode is None:
            answer = self.warm.lines.read(timeout)
            if answer == {}:  # the warm process has died: so does the target's
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.pid, signal.SIGKILL)
                self.returncode = -signal.SIGKILL
            elif answer is not None:
                self.returncode = answer["returncode"]
        return self.returncode


class Lines:
    """JSON objects, one a line, read from a pipe with a timeout: None when
    none came in time; {} when the pipe has ended."""

    def __init__(self, fd: int):
        self.fd, self.buffer = fd, b""

    def read(self, timeout: float | None) -> dict | None:
        while b"\n" not in self.buffer:
            ready, _, _ = select.select([self.fd], [], [], timeout)
            if not ready:
                return None
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return {}
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)


def guess_framework(target: str, framework: str) -> str:
    """The framework a target's module imports (or is: `impl_jax:...`), read
    from its text without importing it (`framework` if given; NumPy when
    unsure): the warm process imports it before the target's process is
    forked. A wrong guess costs time only: the target's process imports what
    it needs."""
    from shared import registry
    from triptych.check.target import is_path
    from triptych.common.backends import missing_package

    if framework != "auto":
        return framework
    where = target.rpartition(":")[0]
    if is_path(where):
        try:
            text = Path(where).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            text = ""
        roots = set(re.findall(r"^\s*(?:from|import)\s+(\w+)", text, re.MULTILINE))
    else:  # a module found on sys.path
        roots = {where.partition(".")[0]}
    found = []
    for name in registry.names():
        f = registry.get(name)
        packages = {f.package, *f.install.requires}
        if not f.arrays.numpy and roots & packages and not missing_package(name):
            found.append(name)
    return found[0] if len(found) == 1 else registry.reference().name


def main(framework: str) -> None:
    """The warm process: import, say ready, then fork one target at a time;
    ends (never returns) with its stdin, or at an error, with the target."""
    from shared import registry

    before = dict(os.environ)
    for module in PRELOAD:
        with contextlib.suppress(Exception):
            importlib.import_module(module)
    with contextlib.suppress(Exception):  # the target's process says why not
        package = registry.get(framework).package
        importlib.import_module(package)
        importlib.import_module(f"{package}.backend")
    # what the imports put in the environment (JAX: TF_CPP_MIN_LOG_LEVEL), as
    # a fresh process's imports would have
    added = {k: v for k, v in os.environ.items() if k not in before}
    answers = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # nothing printed here can reach the command's answers
    requests = Lines(0)

    def answer(**fields) -> None:
        answers.write(json.dumps(fields).encode() + b"\n")

    pid = None
    try:
        answer(ready=True)
        while request := requests.read(None):
            sys.stdout.flush()
            sys.stderr.flush()
            settled, told = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(answers.fileno())  # the command hears the warm one only
                os.close(settled)
                target_process(request | {"added": added}, told)
            os.close(told)
            os.read(settled, 1)  # its session and files set (or it has died)
            os.close(settled)
            answer(pid=pid)
            code = reaped(pid, requests)
            if code is None:  # the command has ended: so does its target
                break
            pid = None
            answer(returncode=code)
    finally:
        if pid is not None:  # an error, or the command gone: nothing outlives it
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.waitpid(pid, 0)
        os._exit(0)  # no interpreter shutdown with a framework loaded


def reaped(pid: int, requests: Lines) -> int | None:
    """The exit code of the target's process (negative: the signal that ended
    it); None, with the process killed, if stdin ends first."""
    try:
        watch = os.pidfd_open(pid)  # readable when it ends (Linux 5.3 and later)
    except (AttributeError, OSError):
        watch = None
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
            waits = [requests.fd] + ([watch] if watch is not None else [])
            ready, _, _ = select.select(waits, [], [], None if watch else 0.05)
            if requests.fd in ready:
                chunk = os.read(requests.fd, 65536)
                requests.buffer += chunk  # the next request, kept for later
                if not chunk:  # the command has ended: main kills the target
                    return None
    finally:
        if watch is not None:
            os.close(watch)


def target_process(request: dict, told: int) -> None:
    """In the forked process: become what `python -P -m triptych.check`
    would be, say so on `told`, run it, and end as Python would (never
    returns)."""
    code = 1
    try:
        os.setsid()  # its own session before anyone can be told its pid
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            opened = os.open(path, os.O_WRONLY | os.O_APPEND)
            os.dup2(opened, fd)
            os.close(opened)
        os.write(told, b"1")
        os.close(told)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for name, value in request["added"].items():
            os.environ.setdefault(name, value)
        hypothesis_home()
        sys.argv = [CHILD_MODULE, *request["argv"]]
        runpy.run_module(CHILD_MODULE, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exit:  # as Python ends on it
        if exit.code is None or isinstance(exit.code, int):
            code = exit.code or 0
        else:
            print(exit.code, file=sys.stderr)
    except BaseException:  # KeyboardInterrupt too: raised, it is exit code 1
        traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def hypothesis_home() -> None:
    """Hypothesis's folder where a fresh process would put it, under the
    working directory of now, not the warm process's (where it was imported)."""
    configuration = sys.modules.get("hypothesis.configuration")
    if configuration is not None and "HYPOTHESIS_STORAGE_DIRECTORY" not in os.environ:
        with contextlib.suppress(Exception):
            configuration.set_hypothesis_home_dir(Path.cwd() / ".hypothesis")


if __name__ == "__main__":
    main(sys.argv[1])
