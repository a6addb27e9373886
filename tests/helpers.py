"""Small helpers the test bodies share: run a backend on NumPy inputs, get
NumPy back. NumPy only: `tox -e numpy` imports this without torch or jax
(their own helpers are in tests/torch_helpers.py and tests/jax_helpers.py)."""

from __future__ import annotations

import numpy as np

from shared import PRESETS, make_fixture
from shared.golden import load_golden
from shared.gradients import backend_gradients, upstream_gradient

PARAM_NAMES = ("w_q", "w_k", "w_v", "w_o")


def name_of(backend) -> str:
    """'numpy' for the module impl_numpy."""
    return backend.__name__.removeprefix("impl_")


def golden(preset_name: str) -> dict[str, np.ndarray]:
    """The committed oracle results of a preset (cached)."""
    if preset_name not in _GOLDEN:
        _GOLDEN[preset_name] = load_golden(preset_name)
    return _GOLDEN[preset_name]


_GOLDEN: dict[str, dict[str, np.ndarray]] = {}


def run_single(backend, x, w_q, w_k, w_v, dtype, mask=None, scale=True):
    """single_head_attention on NumPy inputs cast to `dtype`; NumPy (out, weights)."""
    args = [backend.from_numpy(a, dtype) for a in (x, w_q, w_k, w_v)]
    mask = None if mask is None else backend.from_numpy(mask)
    out, weights = backend.single_head_attention(*args, mask, scale=scale)
    return backend.to_numpy(out), backend.to_numpy(weights)


def run_multi(backend, x, params, n_heads, dtype, mask=None, scale=True):
    """multi_head_attention on NumPy inputs cast to `dtype`; NumPy (out, weights)."""
    args = [
        backend.from_numpy(a, dtype) for a in (x, *(params[k] for k in PARAM_NAMES))
    ]
    mask = None if mask is None else backend.from_numpy(mask)
    out, weights = backend.multi_head_attention(*args, n_heads, mask, scale=scale)
    return backend.to_numpy(out), backend.to_numpy(weights)


def run_entropy(backend, weights, dtype):
    """attention_entropy on NumPy weights cast to `dtype`; NumPy result."""
    return backend.to_numpy(
        backend.attention_entropy(backend.from_numpy(weights, dtype))
    )


def random_inputs(seed, batch, T, C, D=None):
    """x (*batch, T, C) and (C, D) projections w_q, w_k, w_v, w_o, float64."""
    rng = np.random.default_rng(seed)
    D = C if D is None else D
    x = rng.standard_normal((*batch, T, C))
    params = {name: rng.standard_normal((C, D)) / np.sqrt(C) for name in PARAM_NAMES}
    params["w_o"] = rng.standard_normal((C, C)) / np.sqrt(C)
    return x, params


def masked_problem():
    """x (3, 6, 8), weights (8, 8), a (3, 1, T, T) mask and its fully masked rows.

    Item 0's query 2 may attend nothing; item 1 (length 0) has no real key at
    all: 1 + T = 7 fully masked rows, `empty` (3, T). All NumPy float64.
    """
    T = 6
    x, params = random_inputs(12, (3,), T, 8)
    lengths = np.array([6, 0, 3])  # item 1: no real key at all
    rows = np.ones((3, 1, T, T), dtype=bool)
    rows[0, :, 2] = False  # item 0: query 2 may attend nothing
    mask = (np.arange(T) < lengths[:, None])[:, None, None, :] & rows  # (3, 1, T, T)
    empty = np.zeros((3, T), dtype=bool)
    empty[0, 2], empty[1] = True, True
    return x, params, mask, empty


def gradient_case(preset_name, dtype="float64"):
    """x, the four projections (NumPy, in `dtype`), H and the seeded d_out of a
    preset (`shared.gradients.upstream_gradient`)."""
    preset = PRESETS[preset_name]
    fixture = make_fixture(preset).astype(dtype)
    d_out = upstream_gradient(preset).astype(dtype)
    return fixture.x, fixture.params, preset.n_heads, d_out


def functional_gradients(backend, x, params, n_heads, d_out, dtype):
    """`multi_head_attention_backward` of a backend on NumPy inputs cast to
    `dtype`; NumPy {name: gradient}."""
    return backend_gradients(backend, "multi", x, params, n_heads, d_out, dtype)


class ShapeOnly:
    """Has .shape and .dtype, and fails on any arithmetic: proof that a call
    that raises did its checks before computing anything."""

    def __init__(self, shape, dtype="float64"):
        self.shape, self.dtype = shape, np.dtype(dtype)

    def __getattr__(self, name):
        raise AssertionError(f"computed on a bad input: .{name}")

    def __array__(self, *args, **kwargs):
        raise AssertionError("computed on a bad input: __array__")

    def __matmul__(self, other):
        raise AssertionError("computed on a bad input: @")

    __rmatmul__ = __matmul__


def train_beside_numpy(names, dtype, steps=8):
    """The trainers `names` and NumPy's, step for step, on a small model
    (triptych.train.loop.train); their TrainResults."""
    from shared.train import TrainConfig, make_task
    from triptych.common.threads import thread_limits
    from triptych.train import loop

    config = TrainConfig(
        vocab=8, seq_len=8, d_model=16, n_heads=2, batch=4, steps=steps, held_out=8
    )
    with thread_limits(1):  # as triptych train: more threads only wait on tiny work
        return loop.train(make_task(config), ["numpy", *names], dtype, rows=[])


def assert_trained_step_for_step(results) -> None:
    """Every pair of trainers within the tolerance at every step, each step's
    difference printed on failure; and every trainer has learned alike."""
    assert results.nan is None
    beyond = {pair: step for pair, step in results.first_outside().items() if step}
    assert not beyond, f"first step beyond the tolerance: {beyond}; {results.rows}"
    assert len(results.rows) == results.task.config.steps
    accuracy = {name: run.accuracy_after for name, run in results.runs.items()}
    assert len(set(accuracy.values())) == 1, accuracy
