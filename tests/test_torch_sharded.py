"""torch's process groups always end: a rank killed on purpose leaves the
others to end on their own with a clear error (no hang, no process left); and
torch's own context-parallel attention does not run on CPU, for the reason
docs/sharding.md gives."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

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
    assert line.startswith("torch on 4 processes failed: ")
    assert "rank 2: killed by SIGKILL" in line


def test_the_launchers_deadline_kills_and_reaps_every_rank():
    """Ranks still running at the launcher's deadline (here 0 s: still
    starting) are killed, their process groups with them, and reaped."""
    runs = [Run("sequence", 2, Problem(T=32))]
    with pytest.raises(DeviceFailureError) as failure:
        launch_torch(runs, 2, rank_timeout_s=5, timeout_s=0)
    assert [o["status"] for o in failure.value.outcomes] == ["killed", "killed"]
    assert all(_gone(o["pid"]) for o in failure.value.outcomes)


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
