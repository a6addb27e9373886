"""`main([WORKDIR, RANK, N, PORT])`: one device of torch's sharded attention.
`triptych.shard.engines.launch_torch` runs it once per rank, in a process
forked from its forkserver (`forked`), which has torch imported already.

It joins the process group (gloo over loopback, through the TCPStore the
launcher holds at PORT, every collective within the group's timeout), runs
each run of WORKDIR/spec.json with its rows, and writes what it held to
WORKDIR/rank-RANK.json (rank 0 also the outputs, WORKDIR/outputs.npz). Any
error is one line in WORKDIR/error-RANK.txt and exit code 1.

KILL_ENV names a rank that kills itself (SIGKILL) in its first run, after
the first call: the tests prove that the others then end with a clear
error, not a hang.
"""

from __future__ import annotations

import datetime
import json
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np

from triptych.common.resident import heap_frozen
from triptych.shard.memory import arrays_summary, die_with_parent, peak_of
from triptych.shard.problem import BIASES, PARAMS, Run

KILL_ENV = "TRIPTYCH_SHARD_KILL_RANK"


def run_rank(spec: dict[str, Any], rank: int, N: int, port: int) -> dict:
    """Join the group, run every run, leave the group; what this rank held."""
    import torch
    import torch.distributed as dist
    from torch.overrides import TorchFunctionMode

    from impl_torch import sharded
    from triptych.common.backends import load_backend

    torch_backend = load_backend("torch")
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // N))
    timeout = datetime.timedelta(seconds=spec["rank_timeout_s"])
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=N,
                            timeout=timeout)  # fmt: skip

    class Recorder(TorchFunctionMode):
        """The shape and item size of every tensor a torch function returns."""

        def __init__(self):
            super().__init__()
            self.arrays = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            result = func(*args, **(kwargs or {}))
            for t in result if isinstance(result, tuple) else (result,):
                if isinstance(t, torch.Tensor):
                    self.arrays.append((tuple(t.shape), t.element_size()))
            return result

    # The collection before each run's peak (peak_of) then looks only at what
    # the runs made, not at all of torch's objects.
    facts, outputs = [], {}
    with heap_frozen():
        try:
            for index, fields in enumerate(spec["runs"]):
                run = Run.from_dict(fields)
                arrays = run.problem.inputs()
                as_torch = {
                    name: torch_backend.from_numpy(arrays[name], run.problem.dtype)
                    for name in (*PARAMS, *BIASES, "x")
                }
                keep = arrays["keep"]
                keep = None if keep is None else torch.from_numpy(keep)
                x, keep = sharded.shard_sequence(as_torch.pop("x"), keep)
                function = (
                    sharded.ring_attention
                    if run.strategy == "sequence"
                    else sharded.head_parallel_attention
                )
                weights = [as_torch.pop(name) for name in PARAMS]

                def call(
                    x=x, keep=keep, w=weights, b=as_torch, f=function, H=run.problem.H
                ):
                    return f(x, *w, H, keep, biases=b)

                with Recorder() as recorder:
                    out = call()
                if os.environ.get(KILL_ENV) == str(rank) and index == 0:
                    os.kill(os.getpid(), signal.SIGKILL)
                out, peak = peak_of(call)
                full = sharded.unshard_sequence(out, run.problem.T)
                outputs[f"run{index}"] = torch_backend.to_numpy(full)
                facts.append(
                    dict(
                        x_shard_shape=list(x.shape),
                        out_shard_shape=list(out.shape),
                        peak_bytes=peak,
                        **arrays_summary(recorder.arrays),
                    )
                )
        finally:
            dist.destroy_process_group()
    return dict(facts=facts, outputs=outputs)


def main(argv: list[str]) -> int:
    die_with_parent()
    workdir, rank, N, port = Path(argv[0]), int(argv[1]), int(argv[2]), int(argv[3])
    try:
        spec = json.loads((workdir / "spec.json").read_text())
        done = run_rank(spec, rank, N, port)
    except Exception as error:
        message = (str(error).strip().splitlines() or [""])[0]
        (workdir / f"error-{rank}.txt").write_text(f"{type(error).__name__}: {message}")
        return 1
    if rank == 0:
        np.savez(workdir / "outputs.npz", **done["outputs"])
    (workdir / f"rank-{rank}.json").write_text(json.dumps(done["facts"]))
    return 0


def forked(argv: list[str], log: str, env: dict[str, str]) -> None:
    """`main(argv)` in a process forked from the launcher's forkserver, set up
    as the launcher's other children are: its own session (so that killing
    its process group kills all it started), the launch's environment, its
    output in the file `log`, and an end when the launcher ends."""
    os.setsid()
    _end_with_the_launcher()
    os.environ.clear()
    os.environ.update(env)  # the launch's, not the forkserver's (KILL_ENV)
    with open(log, "w") as out, open(os.devnull) as nothing:
        os.dup2(nothing.fileno(), 0)
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
    sys.exit(main(argv))


def _end_with_the_launcher() -> None:
    """Kill this rank when the launcher ends, however it ends (SIGKILL too).
    `main`'s PR_SET_PDEATHSIG watches the parent, here the forkserver, which
    lives on while any rank holds its pipe; multiprocessing's sentinel of the
    launcher closes when the launcher's process does."""
    launcher = multiprocessing.parent_process()

    def watch() -> None:
        multiprocessing.connection.wait([launcher.sentinel])
        os.killpg(0, signal.SIGKILL)  # this rank's own group (setsid)

    threading.Thread(target=watch, name="launcher-watch", daemon=True).start()
