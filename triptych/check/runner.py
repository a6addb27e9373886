"""Each target checked in a Python process of its own, with a timeout.

The parent (`check`) starts `python -P -m triptych.check JOB EVENTS` (with
the folder that holds this package first on PYTHONPATH, so the child runs
this very code; on Linux forked, as that process would be, from a warm one
that has imported NumPy and the framework: triptych/check/warm.py) in a
session of its own, its output in files, and reads the
events the child appends to EVENTS, one JSON object a line: `start` (the
adapter), `begin` and `property` (one per property), `done`, or `error`. So
an implementation that loops forever is killed at the timeout, one that
crashes the interpreter (a segfault, os.abort) ends its process only, and
either way the properties it finished are kept and its row says FAIL with
what happened while checking which property. The child (`child_main`)
appends the working directory to sys.path last, so `module:function` finds
the user's modules as `python -m` would, without shadowing this package.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from triptych.check import warm
from triptych.check.causes import causes
from triptych.common.interrupt import killed_unless_done

POLL_S = 0.1


@dataclass(frozen=True)
class Job:
    """What one child checks, and how (the command's options)."""

    target: str
    framework: str = "auto"
    signature: str = "auto"
    adapter: str | None = None
    dtypes: tuple[str, ...] = ("float64", "float32", "float16", "bfloat16")
    examples: int = 20
    seed: int = 0
    properties: tuple[str, ...] | None = None  # None: every one of the profile
    eager: bool = False  # JAX targets eagerly, not under jax.jit
    profile: str = "default"
    max_t: int = 64
    batch: str = "auto"  # none, one, any: the batch axes x is given with
    variant: dict | None = None  # Variant.to_json(): the options of the variant

    def settings(self):
        from triptych.check.properties import Settings
        from triptych.check.variant import Variant

        return Settings(
            tuple(self.dtypes),
            self.examples,
            self.seed,
            profile=self.profile,
            max_t=self.max_t,
            variant=Variant.from_json(self.variant),
        )


@dataclass
class TargetReport:
    """One target's verdict.

    Attributes:
        target: as given. status: PASS (no property failed), FAIL, or ERROR
            (it cannot be checked: the user can mend that; exit code 2).
        adapter: how it was called ("multi, numpy"), once known.
        error: what went wrong beside the properties (a timeout, a crash,
            an import that raised, a target that cannot be checked).
        properties: each property's Result as JSON.
        seconds: wall-clock time of its process.
        causes: the FAIL rows folded under the cause of each, the news first
            (triptych.check.causes). unchecked: the variant options it takes
            and was not given ("--window W"): its variant went unchecked.
    """

    target: str
    status: str = "PASS"
    adapter: str | None = None
    error: str | None = None
    properties: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    causes: list[dict[str, Any]] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        found = {"PASS": 0, "FAIL": 0, "NOTE": 0, "SKIP": 0}
        for result in self.properties:
            found[result["status"]] += 1
        return found

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Progress:
    """A report as the child's events fill it in."""

    report: TargetReport
    running: str = ""  # the property being checked, if any
    finished: bool = False
    timed_out: bool = False
    batch_broken: str = ""  # the adapter's: see triptych.check.causes


def refuse_what_cannot_fit(max_t: int, timeout_s: float) -> None:
    """A --max-t whose largest problem no memory can hold, or whose float64
    oracle alone would outlast --timeout: one line, before any child starts
    (`triptych.common.limits`). The oracle keeps (*batch, H, T, T) weights in
    float64, beside the problem's mask, a boolean of that shape."""
    import math

    from triptych.check.problems import BATCH_FORMS, catalogue
    from triptych.common import limits

    def size(shape) -> int:
        return math.prod(BATCH_FORMS[shape.rank]) * shape.H * shape.T**2

    largest = max(catalogue(max_t), key=size)
    B, T, H = math.prod(BATCH_FORMS[largest.rank]), largest.T, largest.H
    what = f"the oracle's (*batch, H, T, T) weights and mask at T={T}"
    limits.refuse_unless_fits(
        [limits.Array(what, (B, H, T, T), 8 + 1, ("--max-t",))], {"--max-t": max_t}
    )
    seconds = limits.oracle_seconds(B, H, T, H * largest.D)
    limits.refuse_unless_in_time(seconds, "--max-t", max_t, timeout_s, "--timeout")


def check(
    job: Job, timeout_s: float, on_event: Callable[[dict], None] | None = None
) -> TargetReport:
    """Check `job.target` in a child process; its report, whatever happens."""
    started = time.monotonic()
    progress = Progress(TargetReport(job.target))
    with tempfile.TemporaryDirectory(prefix="triptych-check-") as folder:
        events_path = Path(folder) / "events.jsonl"
        events_path.touch()
        package_root = str(Path(__file__).resolve().parents[2])
        path = [package_root, *filter(None, [os.environ.get("PYTHONPATH")])]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
        argv = [json.dumps(asdict(job)), str(events_path)]
        framework = warm.guess_framework(job.target, job.framework)
        warm.prepare(framework, env, timeout_s)  # its imports, once a command
        with (
            open(Path(folder) / "stdout", "w") as stdout,
            open(Path(folder) / "stderr", "w+") as stderr,
        ):

            def start() -> subprocess.Popen | warm.Forked:
                found = warm.forked(argv, stdout, stderr, env, framework)
                return found or subprocess.Popen(
                    [sys.executable, "-P", "-m", warm.CHILD_MODULE, *argv],
                    stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                    env=env, start_new_session=True,
                )  # fmt: skip

            with killed_unless_done(start, kill) as child:  # nothing outlives it
                follow(child, events_path, started + timeout_s, progress, on_event)
            stderr.seek(0)
            last_line = last_error(stderr.read())
    report = progress.report
    report.seconds = time.monotonic() - started
    where = f" while checking {progress.running}" if progress.running else ""
    if report.status != "ERROR" and not report.error:
        if progress.timed_out:
            report.error = f"timed out after {timeout_s:g} s{where} (an endless loop?)"
        elif child.returncode != 0 or not progress.finished:
            report.error = ended(child.returncode) + where
            report.error += f": {last_line}" if last_line else ""
    if report.error and report.status == "PASS":
        report.status = "FAIL"
    report.causes = causes(report.properties, progress.batch_broken)
    return report


JAX_NOTES = ("For simplicity, JAX has removed", "-" * 20)
"""The lines JAX adds under an exception raised through its functions (its
traceback filtering): never the error itself."""


def last_error(stderr: str) -> str:
    """The last line of a child's stderr that is not JAX's note under it: the
    exception, as 'IndexError: index 3 is out of bounds'."""
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith(JAX_NOTES)]
    return lines[-1] if lines else ""


def follow(child, events_path: Path, deadline: float, progress, on_event) -> None:
    """Read the child's events into `progress` until the child ends, or the
    deadline passes (then kill it)."""
    with open(events_path) as events:
        while True:
            done = child.poll() is not None
            if not done and time.monotonic() > deadline:
                progress.timed_out = True
                kill(child)
                done = True
            for line in events.readlines():
                take(progress, json.loads(line), on_event)
            if done:
                return
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(POLL_S)  # back at once when the child ends


def take(progress: Progress, event: dict, on_event) -> None:
    """One event of the child into the report."""
    report, kind = progress.report, event["event"]
    if kind == "start":
        report.adapter = event["adapter"]
        report.unchecked = event.get("unchecked", [])
        progress.batch_broken = event.get("batch_broken", "")
        progress.running = ""
    elif kind == "begin":
        progress.running = event["property"]
    elif kind == "property":
        report.properties.append(event["result"])
        progress.running = ""
        if event["result"]["status"] == "FAIL":
            report.status = "FAIL"
    elif kind == "error":
        report.status = "ERROR" if event["usage"] else "FAIL"
        report.error = event["message"]
        report.unchecked = event.get("unchecked", [])
    elif kind == "done":
        progress.finished = True
    if on_event is not None:
        on_event(event)


def ended(returncode: int | None) -> str:
    """How a child ended: 'crashed (SIGSEGV)' or 'exited with code 3'."""
    if returncode is not None and returncode < 0:
        with contextlib.suppress(ValueError):
            return f"crashed ({signal.Signals(-returncode).name})"
        return f"crashed (signal {-returncode})"
    return f"exited with code {returncode} before it finished"


def kill(child: subprocess.Popen | warm.Forked) -> None:
    """Kill the child's process group (the child and all it started); reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


def child_main(argv: list[str]) -> int:
    """`python -m triptych.check JOB EVENTS`: check one target, appending
    events to EVENTS; exit code 0 (done), 2 (it cannot be checked), 1 (its
    import raised)."""
    from triptych.check import properties
    from triptych.check.target import TargetImportError
    from triptych.common.errors import CommandError

    job = Job(**json.loads(argv[0]))
    sys.path.append(os.getcwd())  # the user's modules, after this package
    with open(argv[1], "a") as events:

        def emit(**event) -> None:
            events.write(json.dumps(event) + "\n")
            events.flush()

        emit(event="begin", property="how to call it")
        try:
            adapter = make_adapter(job)
        except CommandError as error:  # the target, its framework, the hook
            needs = getattr(error, "needs", [])  # a variant's options: see options.py
            emit(event="error", usage=True, message=str(error), unchecked=needs)
            return 2
        except TargetImportError as error:
            emit(event="error", usage=False, message=str(error))
            return 1
        emit(
            event="start",
            adapter=adapter.describe(),
            batch_broken=adapter.batch_broken,
            unchecked=adapter.unchecked,
        )
        one_thread(adapter.framework)
        settings = job.settings()
        for id in job.properties or properties.property_ids(settings):
            emit(event="begin", property=id)
            result = properties.run_property(adapter, settings, id)
            emit(event="property", result=result.to_json())
        emit(event="done")
    return 0


def one_thread(framework: str) -> None:
    """A framework with a thread count of its own (torch) on one thread in
    this child: the problems are small (T <= 65, C <= 16 by default), and on
    a busy machine torch's second thread spins, up to 100 times slower a call
    here (165 ms against 1.5 ms at T = 65 on 2 busy cores). The results
    differ from two threads' within the tolerance only; the pytest plugin, in
    the user's own process, leaves it as it is."""
    from shared import registry
    from triptych.common.backends import hooks

    if registry.get(framework).own_threads:
        hooks(framework).set_threads(1)


def make_adapter(job: Job):
    """The adapter of the job's target (through its --adapter hook if any).

    Raises:
        TargetError: the target (or the hook) cannot be checked.
        TargetImportError: importing it raised.
    """
    from triptych.check.adapters import adapter_for, hooked
    from triptych.check.target import TargetError, load, one_line
    from triptych.common.errors import CommandError

    target = load(job.target)
    options = {
        "batch": job.batch,
        "eager": job.eager,
        "dtype": job.settings().working,
        "variant": job.settings().variant,
    }
    if job.profile == "strict":  # JAX compiled as XLA compiles by default
        options["jit_options"] = None
    try:
        if job.adapter:
            return hooked(load(job.adapter), target, job.framework, **options)
        return adapter_for(target, job.framework, job.signature, **options)
    except CommandError:
        raise
    except Exception as error:  # e.g. a module class that cannot be built
        raise TargetError(f"{job.target}: cannot adapt it: {one_line(error)}") from None
