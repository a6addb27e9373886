"""NumPy's sharded attention in this process: one process plays every device
(impl_numpy.sharded's list of shards), every array it makes recorded."""

from __future__ import annotations

from typing import Any

import numpy as np

from triptych.shard.memory import RECORDED, Recorded, arrays_summary
from triptych.shard.problem import BIASES, PARAMS, Run


def run_numpy(run: Run) -> dict[str, Any]:
    """The NumPy simulation, every array it makes recorded."""
    from impl_numpy import sharded

    arrays = run.problem.inputs()
    cast = {n: arrays[n].astype(run.problem.dtype) for n in (*PARAMS, *BIASES, "x")}
    x, keep = sharded.shard_sequence(
        cast.pop("x").view(Recorded), arrays["keep"], n_devices=run.devices
    )
    function = (
        sharded.ring_attention
        if run.strategy == "sequence"
        else sharded.head_parallel_attention
    )
    weights = [cast.pop(name) for name in PARAMS]
    RECORDED.clear()
    out = function(x, *weights, run.problem.H, keep, biases=cast)
    facts = arrays_summary(RECORDED)
    RECORDED.clear()
    return dict(
        out=np.asarray(sharded.unshard_sequence(out, run.problem.T)),
        x_shard_shape=list(x[0].shape),
        out_shard_shape=list(out[0].shape),
        out_shard_count=len(out),
        peak_bytes=None,
        **facts,
    )
