"""Each backend's sharded attention on N devices, run where its engine runs it:
NumPy in this process (a list of shards), torch as N processes joined in a
gloo process group (`launch_torch`, one `torch_rank` child per rank), JAX in
one child process with N CPU devices (`launch_jax`, the `jax_child`).

Every child runs this very code (`python -P -m`, with the folder that holds
`triptych/` first on PYTHONPATH; torch's ranks are forked from a forkserver
started there once per launcher process, with torch already imported), dies
with the launcher (PR_SET_PDEATHSIG; a rank watches the launcher itself),
writes only into a temporary folder, and is killed and reaped whichever way
its launcher is left (a failure, the timeout, Ctrl-C): no child outlives a
run, and the forkserver and multiprocessing's resource tracker end with the
launcher. A run's result is its output (float64 NumPy, (..., T, C)) and
what each device held."""

from __future__ import annotations

import contextlib
import datetime
import json
import multiprocessing
import multiprocessing.forkserver
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from shared import registry
from triptych.common.errors import CommandError
from triptych.common.interrupt import killed_unless_done, stops_deferred
from triptych.shard.failures import (
    DeviceFailureError,
    failure_line,
    forkserver_ended,
    how_it_ended,
)
from triptych.shard.problem import Run
from triptych.shard.simulated import run_numpy

RANK_TIMEOUT_S = 60
"""The process group's timeout: the longest any collective or message waits."""
TIMEOUT_S = 900
"""The longest one launch (all its runs) may take before its children are killed."""
DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


class DevicesError(CommandError):
    """JAX has fewer devices than asked for (exit code 2)."""


def run_backend(backend: str, runs: Sequence[Run], **limits) -> list[dict[str, Any]]:
    """Every run with `backend`'s sharded attention, where the registry's
    engine of it runs them (`ENGINES`): one result per run, in order.

    torch's ranks come from a multiprocessing forkserver, so a script that
    calls this guards its top level with `if __name__ == "__main__":`, as
    multiprocessing asks: each rank imports the script's main module again.

    Raises:
        DeviceFailureError: a device failed during a run.
        DevicesError: JAX cannot have the devices asked for.
    """
    return ENGINES[registry.get(backend).shard_engine](runs, **limits)


def in_this_process(runs: Sequence[Run], **limits) -> list[dict[str, Any]]:
    """One process plays every device: NumPy's list of shards."""
    return [run_numpy(run) for run in runs]


def in_process_groups(runs: Sequence[Run], **limits) -> list[dict[str, Any]]:
    """A launch of N torch ranks for each device count N of the runs."""
    results: dict[int, dict[str, Any]] = {}
    for N in sorted({run.devices for run in runs}):
        mine = [i for i, run in enumerate(runs) if run.devices == N]
        done = launch_torch([runs[i] for i in mine], N, **limits)
        results.update(zip(mine, done, strict=True))
    return [results[i] for i in range(len(runs))]


RANK_PRELOAD = ["torch", "torch.distributed", "impl_torch.sharded",
                "triptych.shard.torch_rank"]  # fmt: skip
"""What the forkserver imports once, so that no rank imports it again: torch
alone is about 1.5 s of CPU, paid N times per launch by N fresh processes."""


def _package_root() -> str:
    """The folder that holds triptych/."""
    return str(Path(__file__).resolve().parents[2])


def _child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment, with the folder that holds triptych/ first on the path."""
    path = [_package_root(), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), **(extra or {})}


def _start(
    module: str, args: list[str], workdir: Path, name: str, env
) -> subprocess.Popen:
    """A child `python -P -m module args`, its output in workdir/name.log."""
    with (workdir / f"{name}.log").open("w") as log:
        return subprocess.Popen(
            [sys.executable, "-P", "-m", module, *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its own group: killed with all it started
        )


class _ForkedRank:
    """A rank forked from the forkserver, with the part of Popen's interface
    the launcher uses: pid, poll(), wait() and returncode."""

    def __init__(self, process: multiprocessing.process.BaseProcess):
        self._process = process
        self.pid = process.pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and self._process.exitcode is not None:
            self.returncode = self._process.exitcode
            self._process.close()  # its pipe to the forkserver
        return self.returncode

    def wait(self) -> int | None:
        if self.returncode is None:
            self._process.join()
        return self.poll()


def _rank_server() -> multiprocessing.context.BaseContext:
    """The forkserver the ranks are forked from, running: started once per
    process with RANK_PRELOAD imported, where `_start` would start a fresh
    Python that imports torch again for every rank."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(RANK_PRELOAD)
    # The forkserver is `python -c`: its sys.path begins with its working
    # directory (Python 3.11 ignores the sys.path its parent sends, CPython
    # gh-117378), so it starts in the folder that holds triptych/ (what -P and
    # PYTHONPATH do for `_start`'s children). A no-op once it runs.
    with contextlib.chdir(_package_root()):
        multiprocessing.forkserver.ensure_running()
    return context


def _fork_rank(server, args: list[str], workdir: Path, name: str, env) -> _ForkedRank:
    """A torch rank, `torch_rank.forked(args, ...)` forked from `server`, its
    output in workdir/name.log."""
    from triptych.shard.torch_rank import forked

    log = str(workdir / f"{name}.log")
    process = server.Process(target=forked, args=(args, log, env), name=name)
    process.start()
    return _ForkedRank(process)


def _kill(child: subprocess.Popen | _ForkedRank) -> None:
    """Kill the child's process group; reap it."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:  # a forked rank not yet in its own group
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGKILL)
    child.wait()


def launch_torch(
    runs: Sequence[Run],
    N: int,
    *,
    rank_timeout_s: float = RANK_TIMEOUT_S,
    timeout_s: float = TIMEOUT_S,
) -> list[dict[str, Any]]:
    """The runs (all on N devices) with N torch processes, one per rank,
    forked from this process's forkserver (`_rank_server`).

    This process holds the group's TCPStore on a port the OS picks (port 0),
    so no two launches can race for a port. When a rank ends with an error,
    the others are given the group's timeout to end on their own (a message
    to a dead peer fails at once, a collective within the timeout); those
    still running after it, or after `timeout_s` in all, are killed.
    """
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=rank_timeout_s)
    with tempfile.TemporaryDirectory(prefix="triptych-shard-torch-") as folder:
        workdir = Path(folder)
        spec = dict(runs=[run.as_dict() for run in runs], rank_timeout_s=rank_timeout_s)
        (workdir / "spec.json").write_text(json.dumps(spec))
        store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                              timeout=timeout)  # fmt: skip
        # OpenMP reads this only where the forkserver could not preload torch;
        # torch_rank sets torch's threads to the same count itself
        env = _child_env({"OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // N))})
        children = []
        try:
            server = _rank_server()
            for rank in range(N):
                args = [str(workdir), str(rank), str(N), str(store.port)]
                name = f"rank-{rank}"
                with stops_deferred():  # a rank forked is one in `children`
                    try:
                        children.append(_fork_rank(server, args, workdir, name, env))
                    except (EOFError, OSError) as error:  # the forkserver died
                        raise forkserver_ended(error, N, rank) from None
            outcomes = _wait_for_ranks(children, workdir, rank_timeout_s, timeout_s)
        finally:
            for child in children:
                if child.poll() is None:
                    _kill(child)
            del store
        failed = [o for o in outcomes if o["status"] != "ok"]
        if failed:
            raise DeviceFailureError(
                failure_line(outcomes, N), outcomes, failure_line(outcomes, N, 60)
            )
        facts = [json.loads((workdir / f"rank-{r}.json").read_text()) for r in range(N)]
        with np.load(workdir / "outputs.npz") as outputs:
            outs = [outputs[f"run{i}"] for i in range(len(runs))]
    return [
        dict(
            out=outs[i],
            x_shard_shape=facts[0][i]["x_shard_shape"],
            out_shard_shape=facts[0][i]["out_shard_shape"],
            out_shard_shapes=[f[i]["out_shard_shape"] for f in facts],
            peak_bytes=[f[i]["peak_bytes"] for f in facts],
            shapes=sorted({tuple(s) for f in facts for s in f[i]["shapes"]}),
            largest_array_shape=max(
                (f[i] for f in facts), key=lambda r: r["largest_array_bytes"]
            )["largest_array_shape"],
            largest_array_bytes=max(f[i]["largest_array_bytes"] for f in facts),
        )
        for i in range(len(runs))
    ]


def _wait_for_ranks(children, workdir, rank_timeout_s, timeout_s) -> list[dict]:
    """Wait for every rank; how each ended ("ok", "error" with its line, or
    "killed" by this launcher)."""
    deadline = time.monotonic() + timeout_s
    killed: set[int] = set()
    ended: dict[int, float] = {}  # rank -> when it was seen to end
    while any(child.poll() is None for child in children):
        now = time.monotonic()
        for rank, child in enumerate(children):
            if child.poll() is not None:
                ended.setdefault(rank, now)
        if any(child.poll() not in (None, 0) for child in children):
            deadline = min(deadline, now + rank_timeout_s + 10)
        if now > deadline:
            for rank, child in enumerate(children):
                if child.poll() is None:
                    killed.add(rank)
                    _kill(child)
        time.sleep(0.05)
    outcomes = []
    for rank, child in enumerate(children):
        error_file = workdir / f"error-{rank}.txt"
        if rank in killed:
            status, error = "killed", "still running; killed by the launcher"
        elif child.returncode == 0:
            status, error = "ok", None
        elif error_file.exists():
            status, error = "error", error_file.read_text()
        else:
            status, error = "error", how_it_ended(child.returncode)
        outcomes.append(
            dict(
                rank=rank,
                pid=child.pid,
                status=status,
                returncode=child.returncode,
                error=error,
                ended=ended.get(rank),  # the first to end failed first
            )
        )
    return outcomes


def launch_jax(
    runs: Sequence[Run],
    *,
    rank_timeout_s: float = RANK_TIMEOUT_S,
    timeout_s: float = TIMEOUT_S,
) -> list[dict[str, Any]]:
    """Every run in one JAX child with the CPU devices the largest N needs
    (a count set in XLA_FLAGS already is kept: JAX then has what it says)."""
    del rank_timeout_s  # one process: no messages between processes
    flags = os.environ.get("XLA_FLAGS", "")
    if DEVICE_COUNT_FLAG not in flags:
        flags = f"{flags} {DEVICE_COUNT_FLAG}={max(r.devices for r in runs)}".strip()
    with tempfile.TemporaryDirectory(prefix="triptych-shard-jax-") as folder:
        workdir = Path(folder)
        spec = dict(runs=[run.as_dict() for run in runs])
        (workdir / "spec.json").write_text(json.dumps(spec))
        # CPU devices, unless the caller chose JAX's platforms
        platforms = os.environ.get("JAX_PLATFORMS") or "cpu"
        env = _child_env({"XLA_FLAGS": flags, "JAX_PLATFORMS": platforms})

        def start() -> subprocess.Popen:
            return _start("triptych.shard.jax_child", [folder], workdir, "jax", env)

        with killed_unless_done(start, _kill) as child:  # Ctrl-C above all
            try:
                child.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                _kill(child)
                raise DeviceFailureError(
                    f"jax took over {timeout_s:g} s; killed",
                    [dict(rank=0, status="killed", returncode=child.returncode)],
                ) from None
        if child.returncode != 0:
            error_file = workdir / "error.json"
            if error_file.exists():
                error = json.loads(error_file.read_text())
                if error["kind"] == "devices":
                    raise DevicesError(error["message"].partition(": ")[2])
                message = error["message"]
            else:
                log = (workdir / "jax.log").read_text().strip().splitlines()
                message = f"{how_it_ended(child.returncode)}: {(log or [''])[-1]}"
            raise DeviceFailureError(
                f"jax failed: {message}",
                [
                    dict(
                        rank=0,
                        status="error",
                        returncode=child.returncode,
                        error=message,
                    )
                ],
            )
        facts = json.loads((workdir / "jax.json").read_text())
        with np.load(workdir / "outputs.npz") as outputs:
            outs = [outputs[f"run{i}"] for i in range(len(runs))]
    return [dict(out=out, **fact) for out, fact in zip(outs, facts, strict=True)]


ENGINES = {
    registry.ONE_PROCESS: in_this_process,
    registry.PROCESS_GROUP: in_process_groups,
    registry.ONE_CHILD: launch_jax,
}
"""How each engine of shared.registry (`Framework.shard_engine`) runs runs."""
