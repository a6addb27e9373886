"""The property of its gradients: autodiff gradients of sum(out * d_out)
equal central finite differences of the float64 oracle (`gradients`), and
when they do not, which part of attention was cut from the graph.
"""

from __future__ import annotations

import numpy as np

from shared import registry
from shared.tolerances import FINITE_DIFFERENCE_RTOL, FINITE_DIFFERENCE_STEP
from triptych.check import mistakes
from triptych.check.adapters import NoAutodiffError
from triptych.check.problems import Inputs, split_heads
from triptych.check.properties.search import (
    Case,
    Finding,
    Result,
    Settings,
    agree,
    cases,
    failed,
    passed,
    problems,
    search,
)
from triptych.check.target import one_line


def gradients(adapter, settings: Settings) -> Result:
    """Autodiff gradients of sum(out * d_out) equal central finite differences
    of the float64 oracle (relative error below FINITE_DIFFERENCE_RTOL)."""
    id, title = "gradients", "gradients equal the oracle's (finite differences)"
    framework = registry.get(adapter.framework)
    if framework.autodiff is None:  # its gradients are by hand: none to ask for
        why = f"{framework.title} has no autodiff: no gradient to check"
        return Result(id, title, "SKIP", why)

    def check(case):
        inputs = case.problem.inputs()
        try:
            grads, expected = both_gradients(adapter, inputs, case.problem.seed)
        except NoAutodiffError:
            raise
        except AutodiffError as error:
            return Finding(f"autodiff raises {error}", raised=True)
        return gradient_miss(adapter, grads, expected)

    small = Settings(
        settings.dtypes, min(settings.examples, 3), settings.seed, max_t=settings.max_t
    )
    found = search(cases(problems(adapter, settings, "gradients")), check, small)
    if found.case is None:
        return passed(
            id, title, found, f"relative error below {FINITE_DIFFERENCE_RTOL:g}"
        )
    if found.finding.raised:
        return failed(id, title, found)
    return failed(id, title, found, gradient_diagnosis(adapter, found.case, settings))


class AutodiffError(Exception):
    """The framework's autodiff raised on the implementation."""


def both_gradients(adapter, inputs: Inputs, seed: int):
    """(autodiff, finite differences of the oracle) for a d_out drawn from the
    seed."""
    arrays = adapter.arrays(inputs, "float64")
    out, _ = adapter.truth_of(arrays, inputs.mask, inputs.H)
    d_out = np.random.default_rng(seed + 2).standard_normal(out.shape)
    try:
        grads = adapter.gradients(inputs, d_out)
    except NoAutodiffError:
        raise
    except Exception as error:
        raise AutodiffError(one_line(error)) from error
    return grads, finite_differences(adapter, arrays, inputs, d_out)


def gradient_miss(adapter, grads, expected) -> Finding | None:
    """The first differentiable input whose autodiff gradient misses finite
    differences by more than FINITE_DIFFERENCE_RTOL of its scale."""
    for name in adapter.differentiable:
        g, e = grads[name], expected[name]
        if g.shape != e.shape:
            return Finding(f"d{name} has shape {g.shape}, expected {e.shape}")
        scale = max(float(np.abs(e).max(initial=0.0)), 1.0)
        error = np.abs(g - e)
        if not np.all(error <= FINITE_DIFFERENCE_RTOL * scale):
            error = np.where(np.isnan(error), np.inf, error)
            index = tuple(int(i) for i in np.unravel_index(np.argmax(error), g.shape))
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


def finite_differences(
    adapter, arrays, inputs: Inputs, d_out, frozen=None
) -> dict[str, np.ndarray]:
    """Central differences of sum(out * d_out) in float64: of the oracle
    (`frozen` None), or of vectorized attention whose `frozen` parts (some
    of "q", "k", "v"; none: the oracle's twin) are computed from the
    unchanged arrays, as if detached from the graph."""
    h = FINITE_DIFFERENCE_STEP

    def loss(changed):
        if frozen is not None:
            out = detached(adapter, changed, arrays, inputs, frozen)
        else:
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


def detached(adapter, changed, base, inputs: Inputs, frozen) -> np.ndarray:
    """out of attention (float64, vectorized) on the `changed` arrays, with
    the parts in `frozen` ("q", "k", "v") taken from `base` instead."""
    from triptych.check.problems import merge_heads

    def part(name):
        arrays = base if name in frozen else changed
        if adapter.level == "qkv":
            return arrays[name]
        H = 1 if adapter.one_head else inputs.H
        return split_heads(arrays["x"] @ arrays[f"w_{name}"], H)

    q, k, v = part("q"), part("k"), part("v")
    mask = inputs.mask
    if mask is not None and adapter.one_head and mask.ndim > 2:
        mask = mask[..., 0:1, :, :]
    out, _, _ = mistakes.core(q, k, v, mask, "", q.shape[-3] * q.shape[-1])
    if adapter.level == "qkv":
        return out
    merged = merge_heads(out)
    return merged if adapter.one_head else merged @ changed["w_o"]


CUTS = (
    (
        ("q", "k"),
        "the attention weights are cut from the graph (.detach(), "
        ".numpy() or stop_gradient on the scores or the softmax)",
    ),
    (("k",), "the keys are cut from the graph (k.detach() or stop_gradient(k))"),
    (("q",), "the queries are cut from the graph (q.detach() or stop_gradient(q))"),
    (("v",), "the values are cut from the graph (v.detach() or stop_gradient(v))"),
)
"""What part of attention a gradient that misses may be detached from."""


def gradient_diagnosis(adapter, case: Case, settings: Settings) -> str | None:
    """Why the gradients miss: the forward already wrong (then nothing is
    guessed), or a part of attention detached from the graph, where the
    gradients match that detachment's on the failing problem and on one with
    T = 3 (at T = 1 the weights do not depend on q or k, so dW_q = dW_k = 0 is
    the truth and nothing can tell)."""
    inputs = case.problem.inputs()
    try:
        got = adapter.run(inputs, "float64")
    except Exception:
        return None
    if agree(got, adapter.truth(inputs, "float64"), settings.tol) is not None:
        return (
            f"the forward is already wrong (see oracle:{settings.working}): its "
            f"gradients cannot match the oracle's"
        )
    problem = case.problem
    longer = problem._replace(T=max(problem.T, 3), seed=problem.seed + 1)
    found = []  # (autodiff, finite differences of each cut), per problem
    for p in (problem, longer):
        inputs = p.inputs()
        arrays = adapter.arrays(inputs, "float64")
        out, _ = adapter.truth_of(arrays, inputs.mask, inputs.H)
        d_out = np.random.default_rng(p.seed + 2).standard_normal(out.shape)
        try:
            grads = adapter.gradients(inputs, d_out)
        except Exception:
            return None
        cuts = {
            frozen: finite_differences(adapter, arrays, inputs, d_out, frozen)
            for frozen in ((), *(f for f, _ in CUTS))
        }
        found.append((grads, cuts))
    for frozen, text in CUTS:
        matched = all(gradient_miss(adapter, g, c[frozen]) is None for g, c in found)
        told = any(
            gradient_miss(adapter, c[frozen], c[()]) is not None for _, c in found
        )
        if matched and told:
            return text
    return None
