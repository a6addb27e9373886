"""torch's process groups always end: a rank killed on purpose leaves the
others to end on their own with a clear error (no hang, no process left); and
torch's own context-parallel attention does not run on CPU, for the reason
docs/sharding.md gives."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from triptych.shard.engines import DeviceFailureError, launch_torch
from triptych.shard.problem import Problem, Run
from triptych.shard.torch_rank import KILL_ENV

pytestmark = pytest.mark.distributed


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("strategy", ["sequence", "heads"])
def test_a_killed_rank_ends_the_others_with_a_clear_error(monkeypatch, strategy):
    monkeypatch.setenv(KILL_ENV, "2")  # rank 2 kills itself after its first call
    runs = [Run(strategy, 4, Problem(T=64))]
    with pytest.raises(DeviceFailureError) as failure:
        launch_torch(runs, 4, rank_timeout_s=30)
    outcomes = failure.value.outcomes
    assert [o["status"] for o in outcomes] == ["error"] * 4
    assert outcomes[2]["error"] == "killed by SIGKILL"
    for outcome in outcomes[:2] + outcomes[3:]:
        # each ended on its own (not killed by the launcher), with one line
        assert outcome["returncode"] == 1
        assert "\n" not in outcome["error"] and len(outcome["error"]) > 20
    assert all(_gone(o["pid"]) for o in outcomes)
    line = str(failure.value)
    assert "\n" not in line
    assert line.startswith("torch on 4 processes failed: rank 2: killed by SIGKILL; ")
    for outcome in outcomes[:2] + outcomes[3:]:  # whole, for the files
        assert outcome["error"] in line
    short = failure.value.line  # stderr's: each message cut at a word
    assert short.startswith("torch on 4 processes failed: rank 2: killed by SIGKILL")
    assert len(short) < 80 * 3  # each part cut, the same messages one part


def test_the_launchers_deadline_kills_and_reaps_every_rank():
    """Ranks still running at the launcher's deadline (here 0 s: still
    starting) are killed, their process groups with them, and reaped."""
    runs = [Run("sequence", 2, Problem(T=32))]
    with pytest.raises(DeviceFailureError) as failure:
        launch_torch(runs, 2, rank_timeout_s=5, timeout_s=0)
    assert [o["status"] for o in failure.value.outcomes] == ["killed", "killed"]
    assert all(_gone(o["pid"]) for o in failure.value.outcomes)


def test_ctrl_c_while_a_rank_is_forked_waits_until_it_is_known():
    """The launcher holds Ctrl-C back while it forks a rank (so that the rank
    is in the list its `finally` kills), then raises it as usual."""
    from triptych.common.interrupt import stops_deferred

    # Python's own handler, as a terminal's Python has it (tox starts its
    # envs with SIGINT ignored, and an ignored Ctrl-C stays ignored)
    outside = signal.signal(signal.SIGINT, signal.default_int_handler)
    reached = False
    try:
        with pytest.raises(KeyboardInterrupt), stops_deferred():
            signal.raise_signal(signal.SIGINT)
            reached = True
        assert reached
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, outside)


LAUNCHER = """
import sys
from triptych.shard.engines import launch_torch
from triptych.shard.problem import Problem, Run
if __name__ == "__main__":
    launch_torch([Run("sequence", 2, Problem(T=256))] * int(sys.argv[1]), 2)
"""


def _processes_with(marker: str) -> dict[int, tuple[int, bytes]]:
    """pid: (parent pid, command line) of each process started with `marker`
    in its environment (the launcher, and what it forked or started)."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if marker.encode() not in f.read():
                    continue
            with open(f"/proc/{pid}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                found[int(pid)] = (parent, f.read())
        except OSError:  # ended meanwhile
            continue
    return found


def test_a_killed_launcher_takes_its_ranks_and_forkserver_with_it(tmp_path):
    """SIGKILL the launcher while both ranks run 8,000 problems (left alone,
    about 150 s on a quiet core): the ranks, the forkserver and all else it
    started end on their own, although the forkserver, the ranks' parent,
    outlives the launcher. The 30 s allowed are far below the work left and
    far above what a loaded machine takes to end a process with torch
    imported (over 3 s at a load of 7 on 2 cores)."""
    marker = f"TRIPTYCH_TEST_LAUNCHER={tmp_path.name}"
    key, value = marker.split("=")
    env = {**os.environ, key: value, "TMPDIR": str(tmp_path)}
    command = [sys.executable, "-c", textwrap.dedent(LAUNCHER), "8000"]
    launcher = subprocess.Popen(command, env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120  # a hang's guard
        ranks = set()
        while len(ranks) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
            found = _processes_with(marker)
            servers = {p for p, (_, cmd) in found.items() if b"forkserver" in cmd}
            ranks = {p for p, (parent, _) in found.items() if parent in servers}
        assert len(ranks) == 2
    finally:
        launcher.kill()
        launcher.wait()
    deadline = time.monotonic() + 30
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _processes_with(marker)


CONTEXT_PARALLEL = """
import datetime, sys
import torch, torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.experimental import context_parallel

rank, port = int(sys.argv[1]), int(sys.argv[2])
timeout = datetime.timedelta(seconds=30)
store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)
dist.init_process_group("gloo", store=store, rank=rank, world_size=2, timeout=timeout)
mesh = init_device_mesh("cpu", (2,))
q, k, v = (torch.randn(1, 2, 16, 8) for _ in range(3))
try:
    with context_parallel(mesh, buffers=[q, k, v], buffer_seq_dims=[2, 2, 2]):
        F.scaled_dot_product_attention(q, k, v, is_causal=True)
    print("ran")
except NotImplementedError as error:
    print(error)
finally:
    dist.destroy_process_group()
"""


def test_torch_context_parallel_does_not_run_on_cpu():
    """On CPU, SDPA dispatches to aten._scaled_dot_product_flash_attention_for_cpu,
    which has no sharding rule for DTensor; context_parallel replaces only the
    CUDA kernels (flash, memory-efficient, cuDNN) with its ring."""
    import datetime

    import torch.distributed as dist

    store = dist.TCPStore(
        "127.0.0.1",
        0,
        is_master=True,
        wait_for_workers=False,
        timeout=datetime.timedelta(seconds=30),
    )
    code = textwrap.dedent(CONTEXT_PARALLEL)
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(rank), str(store.port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for rank in range(2)
    ]
    try:
        printed = [rank.communicate(timeout=120)[0].strip() for rank in ranks]
    finally:
        for rank in ranks:
            rank.kill()
            rank.wait()
    expected = (
        "Operator aten._scaled_dot_product_flash_attention_for_cpu.default "
        "does not have a sharding strategy registered."
    )
    assert printed == [expected, expected]
