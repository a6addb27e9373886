"""Sharded attention (impl_*/sharded.py), once per backend on its own engine
(triptych.shard.engines: NumPy in this process, torch as N processes over
gloo, JAX in a child process with N CPU devices): for N = 1, 2 and 4 devices,
both strategies, float64 and float32, T divisible by 2N and not, with and
without a key-padding mask (rows with nothing to attend among them), and for
N = 8 a smaller set (docs/sharding.md says why): the output equals the float64
oracle and the single-device attention of the same framework; each device
holds only its rows of the input and the output; and no device ever makes
the full (T, T) scores. Each backend's runs are launched once, for the module.

Marked `distributed`: tox -e distributed runs them (with every backend)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import name_of, per_process_cache

from shared import assert_close
from shared.sharding import chunk_length, zigzag_positions
from triptych.shard import oracle as shard_oracle
from triptych.shard.engines import run_backend
from triptych.shard.problem import BIASES, PARAMS, Problem, Run

pytestmark = pytest.mark.distributed

EVEN = dict(T=96)  # 96 = 2N * c for every N here
ODD = dict(T=91, batch=(2,), padded=True)  # 91 is odd: padding up to 2N * c
RUNS = [
    Run(strategy, N, Problem(dtype=dtype, **size))
    for N in (1, 2, 4)
    for strategy in ("heads", "sequence")
    for dtype in ("float64", "float32")
    for size in (EVEN, ODD)
] + [
    Run(strategy, 8, Problem(dtype="float64", **ODD))
    for strategy in ("heads", "sequence")
]


def run_id(run: Run) -> str:
    p = run.problem
    return f"{run.strategy}-N{run.devices}-{p.dtype}-T{p.T}{'-padded' * p.padded}"


@per_process_cache
def results(backend_name: str) -> tuple:
    """Every run of RUNS with the backend's sharded attention, launched once."""
    return tuple(run_backend(backend_name, RUNS))


def result(backend, run: Run) -> dict:
    return results(name_of(backend))[RUNS.index(run)]


oracle = per_process_cache(shard_oracle)


def single_device(backend, problem: Problem) -> np.ndarray:
    """The same framework on one device: blockwise attention, or, with a
    key-padding mask (which blockwise attention does not take), the naive one."""
    arrays = problem.inputs()
    cast = {n: backend.from_numpy(arrays[n], problem.dtype) for n in (*PARAMS, *BIASES)}
    x = backend.from_numpy(arrays["x"], problem.dtype)
    weights = [cast.pop(n) for n in PARAMS]
    if not problem.padded:
        blockwise = jitted(backend, "multi_head_blockwise_attention")
        out, _ = blockwise(x, *weights, problem.H, block_size=16, **cast)
        return backend.to_numpy(out)
    keep = backend.from_numpy(arrays["keep"])
    mask = backend.key_padding_mask(keep, problem.T, multi_head=True)
    out, _ = jitted(backend, "multi_head_attention")(
        x, *weights, problem.H, mask, **cast
    )
    return backend.to_numpy(out)


def jitted(backend, name):
    """JAX's jitted twin of a function (eager JAX compiles every loop on every
    call), or the function itself."""
    return getattr(backend, f"{name}_jit", getattr(backend, name))


@pytest.mark.parametrize("run", RUNS, ids=run_id)
def test_each_strategy_equals_the_oracle_and_one_device(backend, run):
    out = result(backend, run)["out"]
    assert out.shape == (*run.problem.batch, run.problem.T, run.problem.C)
    assert not np.isnan(out).any()
    assert_close(out, oracle(run.problem), run.problem.dtype, f"{run_id(run)} out")
    alone = single_device(backend, run.problem)
    assert_close(out, alone, run.problem.dtype, f"{run_id(run)} against one device")


POISONED = [
    Run(strategy, N, Problem(dtype=dtype, T=96, poisoned=j))
    for strategy in ("heads", "sequence")
    for N in (2, 4)
    for dtype in ("float64", "float32")
    for j in (40, 95)  # a chunk in the middle of the ring, and the very last row
]


@per_process_cache
def poisoned_results(backend_name: str) -> tuple:
    """Every run of POISONED, launched once (NumPy warns of the overflow that
    makes the poison)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return tuple(run_backend(backend_name, POISONED))


@pytest.mark.parametrize(
    "run", POISONED, ids=lambda r: f"{run_id(r)}-j{r.problem.poisoned}"
)
def test_a_partly_infinite_value_reaches_exactly_the_rows_that_attend_it(backend, run):
    """Position j's value is inf in one feature only: rows j onward (which
    attend it) are NaN, on whichever device they are, and rows before j are
    the oracle's, although their queries meet key j in the same blocks (the
    diagonal chunks) or on the same device (the heads)."""
    j = run.problem.poisoned
    out = poisoned_results(name_of(backend))[POISONED.index(run)]["out"]
    assert np.isnan(out[j:]).all()
    assert np.isfinite(out[:j]).all()
    with np.errstate(over="ignore", invalid="ignore"):  # float64: the poison
        expected = oracle(run.problem)[:j]
    assert_close(out[:j], expected, run.problem.dtype, f"{run_id(run)} rows before {j}")


@pytest.mark.parametrize("run", RUNS, ids=run_id)
def test_each_device_holds_only_its_rows(backend, run):
    """x and the output: R = 2c rows per device, c = ceil(T / 2N)."""
    found = result(backend, run)
    R = 2 * chunk_length(run.problem.T, run.devices)
    batch, C = run.problem.batch, run.problem.C
    assert found["x_shard_shape"] == [*batch, R, C]
    assert found["out_shard_shape"] == [*batch, R, C]
    if name_of(backend) == "torch":  # every rank's own tensor
        assert found["out_shard_shapes"] == [[*batch, R, C]] * run.devices
    if name_of(backend) == "jax":  # one array, its rows spread over the mesh
        spec = ", ".join(["None"] * len(batch) + ["'devices'", "None"])
        assert found["out_sharding"] == f"P({spec})"
        assert found["out_shard_rows"] == [
            [r * R, (r + 1) * R] for r in range(run.devices)
        ]
    if name_of(backend) == "numpy":
        assert found["out_shard_count"] == run.devices


@pytest.mark.parametrize("run", [r for r in RUNS if r.devices > 1], ids=run_id)
def test_no_device_makes_the_full_scores(backend, run):
    """Every array a device made (NumPy: every array derived from x; torch:
    every tensor a torch function returned on any rank; JAX: every array of
    the compiled per-device program). The ring: no array has two axes of T
    or more, and every per-head array (..., H, a, b) has a, b <= R = 2c: its
    scores come in blocks of (c, 2c) at most. The heads: H / N heads of
    (Tp, Tp) scores, never H."""
    found = result(backend, run)
    p = run.problem
    shapes = [tuple(s) for s in found["shapes"]]
    c = chunk_length(p.T, run.devices)
    Tp = zigzag_positions(p.T, run.devices).size
    if run.strategy == "sequence":
        assert (*p.batch, p.H, c, 2 * c) in shapes  # the recorder saw the scores
        assert all(sum(n >= p.T for n in shape) < 2 for shape in shapes)
        per_head = [s for s in shapes if len(s) >= 3 and s[-3] == p.H]
        assert all(max(s[-2:]) <= 2 * c for s in per_head)
    else:
        H_local = p.H // run.devices
        assert (*p.batch, H_local, Tp, Tp) in shapes
        most = math.prod(p.batch) * H_local * Tp * Tp
        assert max(math.prod(shape) for shape in shapes) <= most
        assert (*p.batch, p.H, Tp, Tp) not in shapes
