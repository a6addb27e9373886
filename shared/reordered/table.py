"""The tolerance table's check (tests/test_tolerance_table.py, docs/suite.md):
the worst error of the references, relative as the table measures it, on the
presets and on seeded random problems; `python -m shared.reordered` prints it."""

from __future__ import annotations

import functools
import math

import numpy as np

from shared.reordered.backward import reordered_multi_head_backward
from shared.reordered.forward import (
    entropy_in_orders,
    reordered_multi_head,
    wide_dtype,
)
from shared.reordered.orders import N_ORDERS, ORDER_SEED


def random_problem(seed: int):
    """A seeded problem of the kind the property tests draw: x (..., T, C) and
    four (C, C) projections in float64, H, a mask or None, scale on or off,
    and a standard-normal d_out. T 1 to 64, 1 to 4 heads of width 1 to 16."""
    rng = np.random.default_rng([ORDER_SEED, seed])
    batch = ((), (2,), (2, 3))[rng.integers(3)]
    T, H, D = (
        int(rng.integers(1, 65)),
        int(rng.integers(1, 5)),
        int(rng.integers(1, 17)),
    )
    C = H * D
    x = rng.standard_normal((*batch, T, C))
    params = [rng.standard_normal((C, C)) / math.sqrt(C) for _ in range(4)]
    kind = rng.integers(4)
    if kind == 0:
        mask = None
    elif kind == 1:  # random keys hidden, rows with nothing to attend included
        mask = rng.random((*batch, 1, T, T)) < 0.7
    else:  # key padding: the first `length` keys of each sequence
        lengths = rng.integers(0 if kind == 2 else 1, T + 1, size=batch)
        mask = (np.arange(T) < np.asarray(lengths)[..., None])[..., None, None, :]
    scale = bool(rng.integers(2))
    d_out = rng.standard_normal((*batch, T, C))
    return x, params, H, mask, scale, d_out


def _relative(a, e) -> float:
    return float(np.max(np.abs(a - e) / (1 + np.abs(e)), initial=0.0))


def worst_errors(dtype, problems, matmul="float32", gradients=False) -> dict:
    """The worst relative error, max |a - e| / (1 + |e|), of the N_ORDERS
    references in `dtype` against the float64 oracle, over `problems`
    (`preset_problems`, `random_problems`): {"weights", "out", "entropy"}, and
    "gradients" if asked (float32 and float64 only).

    x and params are rounded to `dtype` here, as a backend receives them; a
    result that is not finite is an error, never a small one.
    """
    from shared.dtypes import np_dtype

    dt = np_dtype(dtype)
    kinds = ("weights", "out", "entropy") + (("gradients",) if gradients else ())
    worst = dict.fromkeys(kinds, 0.0)

    def note(kind, value, expected):
        if not np.all(np.isfinite(value)):
            raise ValueError(f"a {dtype} reference's {kind} is not finite")
        worst[kind] = max(worst[kind], _relative(value, expected))

    orders = range(N_ORDERS)
    for x, params, H, mask, scale, d_out, oracle in problems:
        x, params = x.astype(dt), [w.astype(dt) for w in params]
        out, weights = reordered_multi_head(
            x, *params, H, mask, scale=scale, which=orders, matmul=matmul
        )
        note("out", out, oracle["out"])
        note("weights", weights, oracle["weights"])
        # each order's weights, as the dtype holds them, summed in that order
        p = weights.astype(dt).astype(wide_dtype(dt))
        entropy = entropy_in_orders(p, dt, orders).astype(np.float64)
        note("entropy", entropy, oracle["entropy"])
        if gradients:
            grads = reordered_multi_head_backward(
                x,
                *params,
                H,
                d_out.astype(dt),
                mask,
                scale=scale,
                which=orders,
                matmul=matmul,
            )
            expected = oracle["gradients"]()  # computed only when asked
            for name, grad in grads.items():
                note("gradients", grad, expected[name])
    return worst


def _with_oracle(x, params, H, mask, scale, d_out, exact_x=None, exact_params=None):
    """A problem tuple for `worst_errors`, its oracle computed on exact_x and
    exact_params (default: x and params, float64)."""
    from shared.reference import reference_entropy, reference_multi_head

    ex = x if exact_x is None else exact_x
    ep = params if exact_params is None else exact_params
    out, weights = reference_multi_head(ex, *ep, H, mask, scale=scale)
    oracle = {
        "out": out,
        "weights": weights,
        "entropy": reference_entropy(weights),
        "gradients": _gradients(ex, ep, H, mask, scale, d_out),
    }
    return x, params, H, mask, scale, d_out, oracle


def _gradients(x, params, H, mask, scale, d_out):
    """The oracle's gradients, computed only when called: float64, each sum
    taken forward (errs below 1e-13)."""
    return functools.partial(
        reordered_multi_head_backward, x, *params, H, d_out, mask, scale=scale
    )


def preset_problems():
    """The presets as `worst_errors` problems, their oracle the golden files
    (on the float64 inputs, which a backend receives rounded)."""
    from shared.config import PRESETS
    from shared.golden import load_golden
    from shared.gradients import upstream_gradient

    for name, preset in PRESETS.items():
        g = load_golden(name)
        params = [g[k] for k in ("w_q", "w_k", "w_v", "w_o")]
        d_out = upstream_gradient(preset)
        oracle = {  # the loop oracle's results, as committed: not computed again
            "out": g["multi_out"],
            "weights": g["multi_weights"],
            "entropy": g["multi_entropy"],
            "gradients": _gradients(g["x"], params, preset.n_heads, None, True, d_out),
        }
        yield g["x"], params, preset.n_heads, None, True, d_out, oracle


def random_problems(dtype, count: int, start: int = 0):
    """`count` seeded random problems, their oracle on the inputs rounded to
    `dtype` (as the property tests compare, tests/test_properties.py)."""
    from shared.dtypes import np_dtype

    dt = np_dtype(dtype)
    for seed in range(start, start + count):
        x, params, H, mask, scale, d_out = random_problem(seed)
        rx = x.astype(dt).astype(np.float64)
        rp = [w.astype(dt).astype(np.float64) for w in params]
        yield _with_oracle(x, params, H, mask, scale, d_out, rx, rp)


TABLE_PROBLEMS = 200
"""How many random problems the table's check draws, besides the presets."""


def table_rows(count: int = TABLE_PROBLEMS):
    """(dtype, matmul, kind, worst on the presets, worst on `count` random
    problems) for every row of the table and TF32, gradients included."""
    from shared.tolerances import TOLERANCES

    for dtype, matmul in [(d, "float32") for d in TOLERANCES] + [("float32", "tf32")]:
        grads = dtype in ("float64", "float32")
        on_presets = worst_errors(dtype, preset_problems(), matmul, grads)
        on_random = worst_errors(dtype, random_problems(dtype, count), matmul, grads)
        for kind in on_presets:
            yield dtype, matmul, kind, on_presets[kind], on_random[kind]


def main(argv=None) -> None:
    """python -m shared.reordered [--problems N]: the table's check, printed as
    Markdown (docs/suite.md has its output)."""
    import argparse

    from shared.tolerances import TABLE_MULTIPLE, TF32, TOLERANCES

    parser = argparse.ArgumentParser(
        prog="python -m shared.reordered",
        description="the tolerance table against the references' worst errors",
    )
    parser.add_argument("--problems", type=int, default=TABLE_PROBLEMS)
    count = parser.parse_args(argv).problems
    print(
        f"| dtype | result | presets | {count} random problems "
        f"| x {TABLE_MULTIPLE:g} | table |\n|---|---|---|---|---|---|"
    )
    for dtype, matmul, kind, on_presets, on_random in table_rows(count):
        level = TF32 if matmul == "tf32" else TOLERANCES[dtype]
        table = "derived" if kind == "gradients" else f"{level.atol:g}"
        print(
            f"| {'tf32' if matmul == 'tf32' else dtype} | {kind} | {on_presets:.1e} "
            f"| {on_random:.1e} | {TABLE_MULTIPLE * max(on_presets, on_random):.1e} "
            f"| {table} |",
            flush=True,
        )
