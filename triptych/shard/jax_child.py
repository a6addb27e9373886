"""`python -P -m triptych.shard.jax_child WORKDIR`: JAX's sharded attention on
N devices of one process, the child `triptych.shard.engines.launch_jax`
starts with XLA_FLAGS=--xla_force_host_platform_device_count set (JAX reads
it once, when it starts).

For each run of WORKDIR/spec.json: a mesh of N devices, the rows placed with
`shard_sequence`, the jitted strategy lowered and compiled (XLA's memory
analysis of the per-device program is the peak each device holds; its text
gives every array's per-device shape), run, and what each device holds
read from the output's `addressable_shards`. Writes WORKDIR/jax.json and
WORKDIR/outputs.npz; an error is WORKDIR/error.json (its kind: "devices"
when JAX has fewer devices than asked for) and exit code 1.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from triptych.shard.memory import arrays_summary, die_with_parent, hlo_arrays
from triptych.shard.problem import BIASES, PARAMS, Run


def run_all(spec: dict[str, Any]) -> dict[str, Any]:
    """Every run of the spec; what each device held, and the outputs."""
    import jax

    from impl_jax import sharded
    from triptych.common.backends import load_backend

    jax_backend = load_backend("jax")
    facts, outputs = [], {}
    for index, fields in enumerate(spec["runs"]):
        run = Run.from_dict(fields)
        mesh = sharded.make_mesh(run.devices)
        arrays = run.problem.inputs()
        as_jax = {
            name: jax_backend.from_numpy(arrays[name], run.problem.dtype)
            for name in (*PARAMS, *BIASES, "x")
        }
        keep = arrays["keep"]
        x, keep = sharded.shard_sequence(
            as_jax.pop("x"),
            None if keep is None else jax.numpy.asarray(keep),
            mesh=mesh,
        )
        function = (
            sharded.ring_attention_jit
            if run.strategy == "sequence"
            else sharded.head_parallel_attention_jit
        )
        weights = [as_jax.pop(name) for name in PARAMS]
        compiled = function.lower(
            x, *weights, run.problem.H, keep, mesh=mesh, biases=as_jax
        ).compile()
        out = compiled(x, *weights, keep, biases=as_jax)  # the static ones are in
        memory = compiled.memory_analysis()
        peak = (
            memory.argument_size_in_bytes
            + memory.output_size_in_bytes
            + memory.temp_size_in_bytes
            - memory.alias_size_in_bytes
        )
        outputs[f"run{index}"] = jax_backend.to_numpy(
            sharded.unshard_sequence(out, run.problem.T)
        )
        shards = sorted(out.addressable_shards, key=lambda s: s.device.id)
        facts.append(
            dict(
                out_sharding=str(out.sharding.spec),
                out_shard_rows=[
                    list(s.index[-2].indices(out.shape[-2])[:2]) for s in shards
                ],
                x_shard_shape=list(x.addressable_shards[0].data.shape),
                out_shard_shape=list(shards[0].data.shape),
                peak_bytes=[peak] * run.devices,
                **arrays_summary(hlo_arrays(compiled.as_text())),
            )
        )
    return dict(facts=facts, outputs=outputs)


def main(argv: list[str]) -> int:
    die_with_parent()
    workdir = Path(argv[0])
    try:
        done = run_all(json.loads((workdir / "spec.json").read_text()))
    except Exception as error:
        message = (str(error).strip().splitlines() or [""])[0]
        kind = "devices" if "device(s); on CPU, set XLA_FLAGS" in message else "failure"
        error_file = workdir / "error.json"
        error_file.write_text(
            json.dumps(dict(kind=kind, message=f"{type(error).__name__}: {message}"))
        )
        return 1
    np.savez(workdir / "outputs.npz", **done["outputs"])
    (workdir / "jax.json").write_text(json.dumps(done["facts"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
