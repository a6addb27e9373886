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
from helpers import (
    ShapeOnly,
    foreign_array,
    jitted,
    name_of,
    per_process_cache,
    random_inputs,
    swamped_keys,
)

from shared import assert_close
from shared.reference import reference_multi_head
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

POISONED = [  # position j's value is inf in one feature (the test below)
    Run(strategy, N, Problem(dtype=dtype, T=96, poisoned=j))
    for strategy in ("heads", "sequence")
    for N in (2, 4)
    for dtype in ("float64", "float32")
    for j in (40, 95)  # a chunk in the middle of the ring, and the very last row
]


def run_id(run: Run) -> str:
    p = run.problem
    return f"{run.strategy}-N{run.devices}-{p.dtype}-T{p.T}{'-padded' * p.padded}"


@per_process_cache
def results(backend_name: str) -> tuple:
    """Every run of RUNS, then of POISONED (the tests of a poisoned value),
    with the backend's sharded attention, launched once: torch's ranks once
    per device count, one JAX child for all."""
    return tuple(run_backend(backend_name, RUNS + POISONED))


@per_process_cache
def numpy_result(run: Run) -> dict:
    """One run of the NumPy simulation, in this process: each test runs its
    own, so that mutmut (tox -e mutate) sees which tests call ring_attention
    and which head_parallel_attention, and runs a mutant against them."""
    return run_backend("numpy", [run])[0]


def result(backend, run: Run) -> dict:
    if name_of(backend) == "numpy":
        return numpy_result(run)
    return results(name_of(backend))[(RUNS + POISONED).index(run)]


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
        out, _ = blockwise(x, *weights, problem.H, block_size=16, biases=cast)
        return backend.to_numpy(out)
    keep = backend.from_numpy(arrays["keep"])
    mask = backend.key_padding_mask(keep, problem.T, multi_head=True)
    out, _ = jitted(backend, "multi_head_attention")(
        x, *weights, problem.H, mask, biases=cast
    )
    return backend.to_numpy(out)


@pytest.mark.parametrize("run", RUNS, ids=run_id)
def test_each_strategy_equals_the_oracle_and_one_device(backend, run):
    out = result(backend, run)["out"]
    assert out.shape == (*run.problem.batch, run.problem.T, run.problem.C)
    assert not np.isnan(out).any()
    assert_close(out, oracle(run.problem), run.problem.dtype, f"{run_id(run)} out")
    alone = single_device(backend, run.problem)
    assert_close(out, alone, run.problem.dtype, f"{run_id(run)} against one device")


def poisoned_result(backend, run: Run) -> dict:
    """`result` of a run of POISONED: NumPy warns of the overflow that makes
    the poison."""
    with np.errstate(over="ignore", invalid="ignore"):
        return result(backend, run)


@pytest.mark.parametrize(
    "run", POISONED, ids=lambda r: f"{run_id(r)}-j{r.problem.poisoned}"
)
def test_a_partly_infinite_value_reaches_exactly_the_rows_that_attend_it(backend, run):
    """Position j's value is inf in one feature only: rows j onward (which
    attend it) are NaN, on whichever device they are, and rows before j are
    the oracle's, although their queries meet key j in the same blocks (the
    diagonal chunks) or on the same device (the heads)."""
    j = run.problem.poisoned
    out = poisoned_result(backend, run)["out"]
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


# The NumPy simulation, called directly (torch's and JAX's need their process
# group or mesh): what the runs above do not vary. Each strategy on N = 2
# devices against the float64 oracle, and its output in x's dtype.

DIRECT = {
    "no biases": dict(biased=False),
    "no biases, scale=False": dict(biased=False, scale=False),
    "biases, scale=False": dict(scale=False),
    "a batch, no padding": dict(batch=(2, 1)),
    "D = 1": dict(C=4, H=4),
    "float32": dict(dtype="float32", batch=(2,)),
}


@pytest.mark.parametrize("strategy", ["heads", "sequence"])
@pytest.mark.parametrize("case", DIRECT)
def test_numpy_simulation_equals_the_oracle_in_every_case(strategy, case):
    from impl_numpy import sharded

    options = dict(biased=True, scale=True, batch=(), C=8, H=2, dtype="float64")
    options |= DIRECT[case]
    x, p = random_inputs(30, options["batch"], 11, options["C"])
    rng = np.random.default_rng(31)
    b = {name: rng.standard_normal(options["C"]) for name in BIASES}
    b = b if options["biased"] else {}
    dtype = options["dtype"]
    weights = [p[n].astype(dtype) for n in PARAMS]
    rows, keep = sharded.shard_sequence(x.astype(dtype), n_devices=2)
    function = dict(
        heads=sharded.head_parallel_attention, sequence=sharded.ring_attention
    )
    out = function[strategy](
        rows,
        *weights,
        options["H"],
        keep,
        scale=options["scale"],
        biases={n: a.astype(dtype) for n, a in b.items()},
    )
    out = sharded.unshard_sequence(out, 11)
    assert out.dtype == np.dtype(dtype)
    expected, _ = reference_multi_head(
        x, *(p[n] for n in PARAMS), options["H"], scale=options["scale"], biases=b
    )
    assert_close(out, expected, dtype, f"{strategy}, {case}")


@pytest.mark.parametrize("strategy", ["heads", "sequence"])
def test_numpy_simulation_attends_uniformly_where_the_key_bias_swamps_the_keys(
    strategy,
):
    from impl_numpy import sharded

    x, p, b, expected = swamped_keys(32, (2,), 11, 8, 2)
    rows, keep = sharded.shard_sequence(x, n_devices=2)
    function = dict(
        heads=sharded.head_parallel_attention, sequence=sharded.ring_attention
    )
    out = function[strategy](rows, *(p[n] for n in PARAMS), 2, keep, biases=b)
    assert_close(sharded.unshard_sequence(out, 11), expected, "float64", strategy)


@pytest.mark.parametrize("strategy", ["heads", "sequence"])
def test_numpy_simulation_checks_every_argument_before_computing(strategy):
    """A bad bias, an x of another framework (a stand-in: helpers.foreign_array)
    and a keep list of another length raise before any compute (ShapeOnly rows
    fail on any arithmetic)."""
    from impl_numpy import sharded

    x, p = random_inputs(33, (), 8, 8)
    rows, keep = sharded.shard_sequence(x, n_devices=2)
    weights = [p[n] for n in PARAMS]
    function = dict(
        heads=sharded.head_parallel_attention, sequence=sharded.ring_attention
    )
    call = function[strategy]
    for name in BIASES:
        with pytest.raises(ValueError) as raised:
            call(rows, *weights, 2, keep, biases={name: np.ones(4)})
        assert str(raised.value) == f"{name} must have shape (C,) = (8,), got (4,)"
    stand_in = [foreign_array(rows[0], "numpy"), rows[1]]
    with pytest.raises(TypeError) as raised:
        call(stand_in, *weights, 2, keep)
    assert str(raised.value) == (
        "x is a torch tensor, but impl_numpy computes on NumPy arrays: convert it "
        "with impl_torch.to_numpy(x)"
    )
    shape_only = [ShapeOnly(rows[0].shape), ShapeOnly(rows[1].shape)]
    for given in (keep[:1], [*keep, keep[0]]):
        with pytest.raises(ValueError, match="zip"):
            call(shape_only, *weights, 2, given)


# Every option away from its default (tests/test_options.py registers them):
# scale=False, every bias and shard_sequence's key_padding (lengths) at once,
# on 2 devices, against the oracle: NumPy here, JAX in a child with 2 CPU
# devices (eager and jitted), torch as 2 ranks over gloo. torch's group= too:
# a group of its own for each rank, where the whole sequence is its alone;
# a function that dropped its group would shard for 2 and fail.

JAX_OPTIONS = """
import functools, sys
import jax
import jax.numpy as jnp
import numpy as np
jax.config.update("jax_enable_x64", True)
from impl_jax import sharded
folder = sys.argv[1]
given = {k: jnp.asarray(a) for k, a in np.load(f"{folder}/inputs.npz").items()}
mesh = sharded.make_mesh(2)
x, keep = sharded.shard_sequence(given["x"], key_padding=given["lengths"], mesh=mesh)
w = [given[n] for n in ("w_q", "w_k", "w_v", "w_o")]
b = {n: given[n] for n in ("b_q", "b_k", "b_v", "b_o")}
# the plain functions under a jit of our own: eager shard_map compiles op by op
# (10 s); the options reach them as they are given
plain = {
    name: jax.jit(
        functools.partial(
            getattr(sharded, name), n_heads=2, scale=False, biases=b, mesh=mesh,
        )
    )
    for name in ("ring_attention", "head_parallel_attention")
}
found = {}
for name, f in plain.items():
    out = f(x, *w, keep=keep)
    found[name] = np.asarray(sharded.unshard_sequence(out, 6))
for name in ("ring_attention_jit", "head_parallel_attention_jit"):
    out = getattr(sharded, name)(
        x, *w, 2, keep, scale=False, biases=b, mesh=mesh,
    )
    found[name] = np.asarray(sharded.unshard_sequence(out, 6))
np.savez(f"{folder}/out.npz", **found)
"""

TORCH_OPTIONS = """
import datetime, sys
import numpy as np
import torch, torch.distributed as dist
from impl_torch import sharded
folder, rank, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
timeout = datetime.timedelta(seconds=30)
store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)
dist.init_process_group("gloo", store=store, rank=rank, world_size=2, timeout=timeout)
try:
    given = {k: torch.from_numpy(a) for k, a in np.load(f"{folder}/inputs.npz").items()}
    w = [given[n] for n in ("w_q", "w_k", "w_v", "w_o")]
    b = {n: given[n] for n in ("b_q", "b_k", "b_v", "b_o")}
    alone = [dist.new_group([0]), dist.new_group([1])][rank]  # every rank makes both
    found = {}
    for where, group in (("world", None), ("alone", alone)):
        x, keep = sharded.shard_sequence(
            given["x"], key_padding=given["lengths"], group=group
        )
        ring = sharded.ring_attention(
            x, *w, 2, keep, scale=False, biases=b, group=group,
        )
        heads = sharded.head_parallel_attention(
            x, *w, 2, keep, scale=False, biases=b, group=group,
        )
        for name, out in (("ring", ring), ("heads", heads)):
            full = sharded.unshard_sequence(out, 6, group=group)
            found[f"{where} {name}"] = full.numpy()
    np.savez(f"{folder}/rank{rank}.npz", **found)
finally:
    dist.destroy_process_group()
"""


def _run_children(commands, env, timeout=120):
    """Run the child processes, each killed if it outlives the test."""
    import subprocess

    children = [
        subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for command in commands
    ]
    try:
        printed = [child.communicate(timeout=timeout)[0] for child in children]
    finally:
        for child in children:
            child.kill()
            child.wait()
    for child, text in zip(children, printed, strict=True):
        assert child.returncode == 0, text


def test_every_option_away_from_its_default_reaches_every_device(backend, tmp_path):
    """ring_attention and head_parallel_attention (and JAX's _jit twins) with
    scale=False and b_q, b_k, b_v, b_o, on the rows of shard_sequence with
    key_padding=lengths, on 2 devices; torch also with group= a group of one
    rank (shard_sequence, both strategies and unshard_sequence)."""
    import os
    import sys
    from pathlib import Path

    from helpers import options_problem

    case = options_problem()
    lengths = case.keep.sum(axis=-1)  # [4, 6]: item 0 pads its last 2 keys
    expected, _ = reference_multi_head(
        case.x, *case.params.values(), case.H, case.keep[:, None, None, :],
        scale=False, biases=case.biases,
    )  # fmt: skip
    inputs = {"x": case.x, "lengths": lengths, **case.params, **case.biases}
    np.savez(tmp_path / "inputs.npz", **inputs)
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": root, "OMP_NUM_THREADS": "1"}
    if name_of(backend) == "numpy":
        from impl_numpy import sharded

        rows, keep = sharded.shard_sequence(case.x, key_padding=lengths, n_devices=2)
        found = {}
        for f in (sharded.ring_attention, sharded.head_parallel_attention):
            out = f(
                rows, *case.params.values(), case.H, keep, scale=False,
                biases=case.biases,
            )  # fmt: skip
            found[f.__name__] = sharded.unshard_sequence(out, 6)
    elif name_of(backend) == "jax":
        from triptych.shard.engines import DEVICE_COUNT_FLAG

        flags = f"{os.environ.get('XLA_FLAGS', '')} {DEVICE_COUNT_FLAG}=2"
        env |= {"XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"}
        _run_children([[sys.executable, "-c", JAX_OPTIONS, str(tmp_path)]], env)
        found = dict(np.load(tmp_path / "out.npz"))
    else:
        import datetime

        import torch.distributed as dist

        store = dist.TCPStore(
            "127.0.0.1", 0, is_master=True, wait_for_workers=False,
            timeout=datetime.timedelta(seconds=30),
        )  # fmt: skip
        command = [sys.executable, "-c", TORCH_OPTIONS, str(tmp_path)]
        ranks = [[*command, str(rank), str(store.port)] for rank in range(2)]
        _run_children(ranks, env)
        found = {
            f"rank {rank}, {name}": out
            for rank in range(2)
            for name, out in np.load(tmp_path / f"rank{rank}.npz").items()
        }
        assert len(found) == 8  # 2 ranks x (world, alone) x (ring, heads)
    assert len(found) >= 2
    for name, out in found.items():
        assert_close(out, expected, "float64", f"{name_of(backend)} {name}")
