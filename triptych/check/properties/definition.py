"""The properties that say what causal self-attention is: it equals the
float64 oracle in each dtype (`oracle`), a change in the future changes no
earlier output (`causality`), each row of weights sums to 1, the scores are
scaled by 1/sqrt(D), a given mask narrows the causal one as the oracle's
does, and batch items and heads are independent.
"""

from __future__ import annotations

import math

import numpy as np

from triptych.check import mistakes
from triptych.check.problems import Inputs
from triptych.check.properties.search import (
    Case,
    Finding,
    Result,
    Settings,
    agree,
    agree_up_to,
    cases,
    changed_after,
    compare,
    failed,
    passed,
    problems,
    rich_problem,
    search,
    tolerance_text,
)
from triptych.check.target import one_line


def oracle(adapter, settings: Settings, dtype: str) -> Result:
    """Output and weights equal the oracle on the inputs rounded to `dtype`."""
    id, title = f"oracle:{dtype}", f"equals the float64 oracle in {dtype}"

    def check(case):
        inputs = case.problem.inputs()
        return agree(adapter.run(inputs, dtype), adapter.truth(inputs, dtype), dtype)

    found = search(cases(problems(adapter)), check, settings)
    if found.case is None:
        return passed(id, title, found, f"within {tolerance_text(dtype)}")
    if found.finding.raised:
        return failed(id, title, found)
    if dtype == "float64" and float32_inside(adapter, found.case):
        return failed(
            id,
            title,
            found,
            "computes in float32 inside (JAX's dot_product_attention runs its "
            "softmax in float32 for float64 inputs)",
            "NOTE",
            f"agrees only within the float32 tolerance: {found.finding.message}",
        )
    return failed(id, title, found, diagnosis_of(adapter, found.case, dtype))


def float32_inside(adapter, case: Case) -> bool:
    """Whether float64 inputs agree with the oracle at float32's tolerance only."""
    for problem in (case.problem, rich_problem(adapter)):
        inputs = problem.inputs()
        got, want = adapter.run(inputs, "float64"), adapter.truth(inputs, "float64")
        if agree(got, want, "float32") is not None:
            return False
    return True


def diagnosis_of(
    adapter, case: Case, dtype: str, tol=None, names=None, mask: str | None = None
) -> str | None:
    """The known mistake the implementation makes on the case and on a richer
    problem with the same kind of mask, as one line (None: none fits)."""
    observed = []
    for problem in (case.problem, rich_problem(adapter, mask or case.problem.mask)):
        inputs = problem.inputs()
        try:
            observed.append((inputs, adapter.run(inputs, dtype)))
        except Exception:
            return None
    mistake = mistakes.diagnose(adapter, observed, dtype, tol or dtype, names)
    return None if mistake is None else mistake.text


def causality(adapter, settings: Settings) -> Result:
    """Changing x after position i changes no output (nor weights) up to i."""
    id, title = "causality", "a change in the future changes no earlier output"
    dtype, tol = settings.working, settings.tol

    def check(case):
        problem, (position,) = case
        i = position % (problem.T - 1)
        inputs = problem.inputs()
        later = changed_after(inputs, i, problem.seed)
        before, after = adapter.run(inputs, dtype), adapter.run(later, dtype)
        return agree_up_to(
            before, after, i, tol, "after x changed from position " + str(i + 1)
        )

    from hypothesis import strategies as st

    def where(case):
        return f", x changed after position {case.extra[0] % (case.problem.T - 1)}"

    found = search(
        cases(problems(adapter, T=(2, 8)), st.integers(0, 6)), check, settings
    )
    if found.case is None:
        return passed(
            id,
            title,
            found,
            "earlier outputs unchanged within " + tolerance_text(tol),
        )
    if found.finding.raised:
        return failed(id, title, found, where=where)
    return failed(id, title, found, leak_pattern(adapter, dtype, tol), where=where)


def leak_pattern(adapter, dtype: str, tol: str) -> str | None:
    """How far the future leaks, read on a rich problem by changing one
    position at a time: 'future leaks at offset k' or 'no causal mask'."""
    problem = rich_problem(adapter)
    inputs = problem.inputs()
    T = problem.T
    base = adapter.run(inputs, dtype)
    fresh = np.random.default_rng(1).standard_normal(inputs.x.shape)
    leaks = set()
    for j in range(1, T):
        x = inputs.x.copy()
        x[..., j, :] = fresh[..., j, :]
        out = adapter.run(inputs.replace(x=x), dtype).out
        for i in range(j):
            if compare("", out[..., i, :], base.out[..., i, :], tol) is not None:
                leaks.add((i, j))
    if not leaks:
        return None
    if len(leaks) == T * (T - 1) // 2:
        return "no causal mask: every query sees every later key"
    k = max(j - i for i, j in leaks)
    hint = " (causal mask off by one)" if k == 1 else ""
    return f"future leaks at offset {k}: query i sees keys up to i + {k}{hint}"


def rows_sum_to_one(adapter, settings: Settings) -> Result:
    """Each row of weights that may attend some key sums to 1."""
    id, title = "rows sum to 1", "each row of attention weights sums to 1"
    dtype, tol = settings.working, settings.tol
    probe = probe_weights(adapter, dtype)
    if isinstance(probe, Result):
        return Result(id, title, probe.status, probe.reason)
    masks = (
        ("none", "shared", "per head", "key padding")
        if adapter.takes_mask
        else ("none",)
    )

    def check(case):
        inputs = case.problem.inputs()
        weights = adapter.run(inputs, dtype).weights
        if weights is None:
            return Finding("returned no weights this time")
        rows = inputs.allowed().any(axis=-1)
        sums = weights.sum(axis=-1)
        return compare("row sums", np.where(rows, sums, 1.0), np.ones_like(sums), tol)

    found = search(cases(problems(adapter, masks=masks)), check, settings)
    if found.case is None:
        return passed(id, title, found, "every row within " + tolerance_text(tol))
    if found.finding.raised:
        return failed(id, title, found)
    return failed(id, title, found, diagnosis_of(adapter, found.case, dtype, tol))


def probe_weights(adapter, dtype):
    """None if the implementation returns weights (..., H, T, T); else a
    SKIP (it returns none) or a FAIL (it raises) Result."""
    inputs = rich_problem(adapter).inputs()
    try:
        weights = adapter.run(inputs, dtype).weights
    except Exception as error:
        return Result("", "", "FAIL", f"raises {one_line(error)}")
    if weights is None:
        return Result(
            "",
            "",
            "SKIP",
            "returns no attention weights of shape (..., H, T, T): only the "
            "output is checked",
        )
    return None


SCALES = ("scale missing", "scale 1/D", "scale 1/sqrt(C)", "scale times")


def scale(adapter, settings: Settings) -> Result:
    """Scores are divided by sqrt(D), the head width (D >= 2, so it matters)."""
    id, title = "scale", "scores scaled by 1/sqrt(D)"
    dtype, tol = settings.working, settings.tol

    def check(case):
        inputs = case.problem.inputs()
        return agree(adapter.run(inputs, dtype), adapter.truth(inputs, dtype), tol)

    found = search(cases(problems(adapter, T=(2, 8), D=(2, 4))), check, settings)
    if found.case is None:
        return passed(id, title, found, "matches the oracle's 1/sqrt(D)")
    if found.finding.raised:
        return failed(id, title, found)
    diagnosis = diagnosis_of(adapter, found.case, dtype, tol, SCALES)
    if diagnosis is None:
        return failed(
            id,
            title,
            found,
            status="SKIP",
            reason="cannot judge: the output matches the oracle at none of the "
            "scales 1/sqrt(D), 1, 1/D, 1/sqrt(C), sqrt(D) (see the other rows)",
        )
    return failed(id, title, found, diagnosis)


def mask(adapter, settings: Settings) -> Result:
    """A given mask (True = may attend), shared, per item, per head or key
    padding, narrows the causal mask as the oracle does."""
    id, title = "mask", "mask: True = may attend, broadcast over batch and heads"
    if not adapter.takes_mask:
        return Result(id, title, "SKIP", "takes no mask: causal attention only")
    dtype, tol = settings.working, settings.tol
    masks = ("shared", "per item", "per head", "key padding")

    def check(case):
        inputs = case.problem.inputs()
        return agree(adapter.run(inputs, dtype), adapter.truth(inputs, dtype), tol)

    found = search(cases(problems(adapter, masks=masks)), check, settings)
    if found.case is None:
        return passed(id, title, found, "matches the oracle on every kind of mask")
    if found.finding.raised:
        return failed(id, title, found)
    names = [m.name for m in mistakes.MISTAKES if m.property == "mask"]
    diagnosis = diagnosis_of(adapter, found.case, dtype, tol, names)
    return failed(
        id, title, found, diagnosis or diagnosis_of(adapter, found.case, dtype, tol)
    )


def independence(adapter, settings: Settings) -> Result:
    """A batch item alone gives what it gives in the batch; changing one
    head's projections changes no other head."""
    id, title = "independence", "batch items and heads are independent"
    batches = adapter.max_batch >= 1
    if not (batches or adapter.several_heads):
        return Result(
            id, title, "SKIP", "takes one sequence of one head: nothing to mix"
        )
    dtype, tol = settings.working, settings.tol
    from hypothesis import strategies as st

    strategy = problems(
        adapter,
        heads=(2, 4) if adapter.several_heads else (1,),
        batches=((2,), (2, 1)) if batches else ((),),
    )

    def check(case):
        problem, (h,) = case
        inputs = problem.inputs()
        if problem.batch:
            full = adapter.run(inputs, dtype)
            for b in range(problem.batch[0]):
                alone = adapter.run(inputs.item(b), dtype)
                found = compare(
                    f"batch item {b} run alone", alone.out, full.out[b : b + 1], tol
                )
                if found is not None:
                    return found
        if problem.H > 1:
            return one_head_changed(adapter, inputs, h % problem.H, dtype, tol)
        return None

    def where(case):
        H = case.problem.H
        return f", head {case.extra[0] % H} changed" if H > 1 else ""

    found = search(cases(strategy, st.integers(0, 3)), check, settings)
    if found.case is None:
        return passed(id, title, found, "no batch item or head changed another")
    if found.finding.raised:
        return failed(id, title, found, where=where)
    diagnosis = diagnosis_of(adapter, found.case, dtype, tol, ("split", "merge"))
    return failed(id, title, found, diagnosis, where=where)


def one_head_changed(
    adapter, inputs: Inputs, h: int, dtype: str, tol: str
) -> Finding | None:
    """Change head h's columns of w_q, w_k, w_v (with w_o's rows of head h
    zero in both runs): the output and the other heads' weights stay."""
    C = inputs.x.shape[-1]
    D = C // inputs.H
    heads = slice(h * D, (h + 1) * D)
    w = {n: a.copy() for n, a in inputs.w.items()}
    w["w_o"][heads] = 0.0
    before = inputs.replace(w=w)
    changed = {n: a.copy() for n, a in w.items()}
    fresh = np.random.default_rng(h + 7).standard_normal((C, 3 * D)) / math.sqrt(C)
    for n, part in zip(("w_q", "w_k", "w_v"), np.split(fresh, 3, axis=1), strict=True):
        changed[n][:, heads] = part
    a, b = adapter.run(before, dtype), adapter.run(inputs.replace(w=changed), dtype)
    others = np.arange(inputs.H) != h
    what = f"the other heads, after head {h}'s projections changed"
    if adapter.level == "qkv":
        return compare(what, b.out[..., others, :, :], a.out[..., others, :, :], tol)
    found = compare(
        f"out, after head {h}'s projections changed (its w_o rows are 0)",
        b.out,
        a.out,
        tol,
    )
    if found is None and a.weights is not None and b.weights is not None:
        found = compare(
            what, b.weights[..., others, :, :], a.weights[..., others, :, :], tol
        )
    return found
