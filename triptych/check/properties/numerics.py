"""The properties of how it computes: scores near the top of each dtype
(`hostile`), the same bits from two calls (`determinism`), and autodiff
gradients equal to finite differences of the oracle (`gradients`).
"""

from __future__ import annotations

import math

import numpy as np

from shared.hostile import HOSTILE_SCORES, max_score, plain_attention, plain_multi_head
from shared.reordered import (
    references,
    reordered_attention,
    reordered_multi_head,
    reordered_single_head,
)
from shared.tolerances import (
    FINITE_DIFFERENCE_RTOL,
    FINITE_DIFFERENCE_STEP,
    derived_tolerance,
)
from triptych.check.adapters import NoAutodiffError
from triptych.check.problems import Inputs, split_heads
from triptych.check.properties.search import (
    Case,
    Finding,
    Result,
    Search,
    Settings,
    agree,
    cases,
    compare,
    failed,
    passed,
    problems,
    search,
)
from triptych.check.target import one_line


def hostile(adapter, settings: Settings) -> Result:
    """Scores near the top of each dtype (HOSTILE_SCORES): finite output, within
    the tolerance derived from a plain computation in the dtype."""
    id, title = (
        "hostile magnitudes",
        "large scores: no overflow, within the derived tolerance",
    )
    dtypes = [d for d in HOSTILE_SCORES if d in settings.dtypes]
    if not dtypes:
        return Result(
            id,
            title,
            "SKIP",
            "no dtype of --dtypes has a hostile level (float32, float16, bfloat16)",
        )
    from hypothesis import strategies as st

    def check(case):
        problem, (dtype,) = case
        inputs = hostile_inputs(problem.inputs(), dtype)
        got, want = adapter.run(inputs, dtype), adapter.truth(inputs, dtype)
        if not np.all(np.isfinite(got.out)):
            index = tuple(int(i) for i in np.argwhere(~np.isfinite(got.out))[0])
            return Finding(
                f"out is not finite at scores of {HOSTILE_SCORES[dtype]:g} in "
                f"{dtype}: {got.out[index]} at {index}",
                index=index,
            )
        found = references_at_level(adapter, inputs, dtype)
        outs, weights = [r[0] for r in found], [r[1] for r in found]
        found = compare(
            "out", got.out, want.out, derived_tolerance(outs, want.out, dtype)
        )
        if found is None and got.weights is not None:
            tolerance = derived_tolerance(weights, want.weights, dtype)
            found = compare("weights", got.weights, want.weights, tolerance)
        return found

    def where(case):
        dtype = case.extra[0]
        return f", in {dtype} with the largest score {HOSTILE_SCORES[dtype]:g}"

    strategy = cases(problems(adapter, T=(2, 8)), st.sampled_from(dtypes))
    found = search(strategy, check, settings)
    if found.case is None:
        return passed(
            id,
            title,
            found,
            f"finite and within the derived tolerance in {', '.join(dtypes)}",
        )
    if found.finding.raised:
        return failed(id, title, found, where=where)
    return failed(id, title, found, overflow_of(adapter, found), where=where)


def hostile_inputs(inputs: Inputs, dtype: str, score: float | None = None) -> Inputs:
    """w_q and w_k scaled so that the largest |score| is `score`
    (HOSTILE_SCORES[dtype] if None)."""
    score = HOSTILE_SCORES[dtype] if score is None else score
    top = max(max_score(inputs.x, inputs.w, inputs.H), 1e-30)
    factor = math.sqrt(score / top)
    w = {**inputs.w, "w_q": inputs.w["w_q"] * factor, "w_k": inputs.w["w_k"] * factor}
    return inputs.replace(w=w)


def references_at_level(adapter, inputs: Inputs, dtype: str) -> list:
    """What `dtype` itself gets wrong on these inputs, at the adapter's level:
    a plain computation, every operation in the dtype (the loosest sane
    implementation), and shared/reordered.py's references in N_ORDERS orders
    (the project's precision policy, the same on every machine): a list of
    (out, weights), float64, for `derived_tolerance` (docs/suite.md)."""
    from shared.dtypes import np_dtype

    cast = {
        n: a.astype(np_dtype(dtype)) for n, a in adapter.arrays(inputs, dtype).items()
    }
    if adapter.level == "qkv":
        q, k, v = cast["q"], cast["k"], cast["v"]
        plain = plain_attention(q, k, v)
        found = references(reordered_attention, q, k, v)
    elif adapter.one_head:
        q, k, v = (
            split_heads((cast["x"] @ cast[n]).astype(cast["x"].dtype), 1)
            for n in ("w_q", "w_k", "w_v")
        )
        out, weights = plain_attention(q, k, v)
        plain = out[..., 0, :, :], weights
        w = (cast["w_q"], cast["w_k"], cast["w_v"])
        found = references(reordered_single_head, cast["x"], *w)
    else:
        w = (cast["w_q"], cast["w_k"], cast["w_v"], cast["w_o"])
        plain = plain_multi_head(cast["x"], *w, inputs.H)
        found = references(reordered_multi_head, cast["x"], *w, inputs.H)
    plain = tuple(a.astype(np.float64) for a in plain)
    return [plain, *found]


OVERFLOW_PROBES = {"float32": 200.0, "float16": 20.0, "bfloat16": 200.0}
"""Scores past what exp takes without the row max subtracted (exp(89) is
inf in float32 and bfloat16, exp(11.1) in float16), far below what q @ k^T
needs to overflow."""


def overflow_of(adapter, found: Search) -> str | None:
    """Why the output is not finite at hostile scores: the row max not
    subtracted (not finite at OVERFLOW_PROBES already), or, in float16,
    q @ k^T taken before the scale (finite there)."""
    problem, (dtype,) = found.case
    inputs = problem.inputs()
    if "not finite" not in found.finding.message:
        try:
            got, want = adapter.run(inputs, dtype), adapter.truth(inputs, dtype)
        except Exception:
            return None
        if agree(got, want, dtype) is not None:
            return "wrong at ordinary scores already (see the other rows)"
        return (
            "loses precision at large scores beyond what a plain computation in "
            "the dtype loses"
        )
    try:
        ordinary = adapter.run(inputs, dtype).out
        probe = adapter.run(
            hostile_inputs(inputs, dtype, OVERFLOW_PROBES[dtype]), dtype
        )
    except Exception:
        return None
    if not np.all(np.isfinite(ordinary)):
        return None
    if not np.all(np.isfinite(probe.out)):
        return (
            "max not subtracted before exp: exp(score) overflows to inf, and "
            "inf / inf = NaN"
        )
    if dtype == "float16":
        return (
            "q @ k^T overflows float16 before the 1/sqrt(D) scale: scale q first, "
            "or take the scores in float32"
        )
    return (
        f"finite at scores of {OVERFLOW_PROBES[dtype]:g}, not at "
        f"{HOSTILE_SCORES[dtype]:g}: a step leaves the range of {dtype} (or of the "
        f"dtype it computes in)"
    )


def determinism(adapter, settings: Settings) -> Result:
    """The same call twice gives the same bits."""
    id, title = "determinism", "two calls on the same input give the same bits"
    dtype = settings.working

    def check(case):
        inputs = case.problem.inputs()
        a, b = adapter.run(inputs, dtype), adapter.run(inputs, dtype)
        for what, x, y in (("out", a.out, b.out), ("weights", a.weights, b.weights)):
            if (
                x is not None
                and y is not None
                and not np.array_equal(x, y, equal_nan=True)
            ):
                gap = np.abs(x - y)
                index = tuple(
                    int(i) for i in np.unravel_index(np.nanargmax(gap), x.shape)
                )
                return Finding(
                    f"{what} differs between two calls by up to "
                    f"{np.nanmax(gap):.3g} at {index}",
                    float(np.nanmax(gap)),
                    index,
                    float(y[index]),
                    float(x[index]),
                )
        return None

    found = search(cases(problems(adapter)), check, settings)
    if found.case is None:
        return passed(id, title, found, "bit for bit")
    if found.finding.raised:
        return failed(id, title, found)
    return failed(
        id,
        title,
        found,
        "randomness inside: dropout left on, or a random draw per call",
    )


def gradients(adapter, settings: Settings) -> Result:
    """Autodiff gradients of sum(out * d_out) equal central finite differences
    of the float64 oracle (relative error below FINITE_DIFFERENCE_RTOL)."""
    id, title = "gradients", "gradients equal the oracle's (finite differences)"
    if adapter.framework == "numpy":
        return Result(id, title, "SKIP", "NumPy has no autodiff: no gradient to check")

    def check(case):
        inputs = case.problem.inputs()
        arrays = adapter.arrays(inputs, "float64")
        out, _ = adapter.truth_of(arrays, inputs.mask, inputs.H)
        d_out = np.random.default_rng(case.problem.seed + 2).standard_normal(out.shape)
        try:
            grads = adapter.gradients(inputs, d_out)
        except NoAutodiffError:
            raise
        except Exception as error:
            return Finding(f"autodiff raises {one_line(error)}", raised=True)
        expected = finite_differences(adapter, arrays, inputs, d_out)
        for name in adapter.differentiable:
            g, e = grads[name], expected[name]
            if g.shape != e.shape:
                return Finding(f"d{name} has shape {g.shape}, expected {e.shape}")
            scale = max(float(np.abs(e).max(initial=0.0)), 1.0)
            error = np.abs(g - e)
            if not np.all(error <= FINITE_DIFFERENCE_RTOL * scale):
                error = np.where(np.isnan(error), np.inf, error)
                index = tuple(
                    int(i) for i in np.unravel_index(np.argmax(error), g.shape)
                )
                return Finding(
                    f"d{name}: autodiff {g[index]:.6g} at {index}, finite "
                    f"differences {e[index]:.6g} (largest |difference| "
                    f"{error.max():.3g})",
                    float(error.max()),
                    index,
                    float(g[index]),
                    float(e[index]),
                )
        return None

    small = Settings(settings.dtypes, min(settings.examples, 3), settings.seed)
    found = search(
        cases(problems(adapter, T=(1, 4), D=(1, 3), heads=(1, 2), batches=((), (2,)))),
        check,
        small,
    )
    if found.case is None:
        return passed(
            id, title, found, f"relative error below {FINITE_DIFFERENCE_RTOL:g}"
        )
    if found.finding.raised:
        return failed(id, title, found)
    return failed(id, title, found, cut_gradient(adapter, found.case))


def finite_differences(adapter, arrays, inputs: Inputs, d_out) -> dict[str, np.ndarray]:
    """Central differences of sum(oracle(arrays).out * d_out) in float64."""
    h = FINITE_DIFFERENCE_STEP

    def loss(changed):
        out, _ = adapter.truth_of(changed, inputs.mask, inputs.H)
        return float(np.sum(out * d_out))

    grads = {}
    for name in adapter.differentiable:
        grad = np.zeros(arrays[name].shape)
        for index in np.ndindex(*grad.shape):
            up, down = arrays[name].copy(), arrays[name].copy()
            up[index] += h
            down[index] -= h
            grad[index] = (
                loss({**arrays, name: up}) - loss({**arrays, name: down})
            ) / (2 * h)
        grads[name] = grad
    return grads


def cut_gradient(adapter, case: Case) -> str | None:
    """'no gradient reaches w_q and w_k' when the scores get none."""
    inputs = case.problem.inputs()
    arrays = adapter.arrays(inputs, "float64")
    out, _ = adapter.truth_of(arrays, inputs.mask, inputs.H)
    d_out = np.random.default_rng(case.problem.seed + 2).standard_normal(out.shape)
    grads = adapter.gradients(inputs, d_out)
    scores = [n for n in ("w_q", "w_k", "q", "k") if n in grads]
    if scores and all(np.all(grads[n] == 0) for n in scores):
        return (
            f"no gradient reaches {' and '.join(scores)}: the attention weights are "
            f"cut from the graph (.detach(), .numpy() or stop_gradient)"
        )
    return None
