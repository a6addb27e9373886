"""The properties `triptych check` proves or refutes, one function each, over
inputs that hypothesis draws; for a failure, the smallest failing input
hypothesis finds and a one-line diagnosis.

Each property runs the implementation (through its adapter) on drawn
problems and holds it to the float64 oracle within the tolerance of the
dtype (`shared.tolerances`), or to a relation with itself (causality,
independence, determinism). A property ends in one of

    PASS   held on every input tried
    FAIL   an input breaks it: the smallest one found, the largest difference,
           and what it looks like
    NOTE   it deviates from the contract in a known, deliberate way that is
           not a failure (float64 computed in float32; fully masked rows as
           the uniform mean, JAX's and flax's policy)
    SKIP   the signature cannot show it (no mask, no weights, no autodiff)

`triptych check` runs them all in a process of its own per target; the pytest
plugin (`triptych.check.plugin`) runs each as a test.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

import numpy as np

from shared.hostile import HOSTILE_SCORES, max_score, plain_attention, plain_multi_head
from shared.tolerances import (
    FINITE_DIFFERENCE_RTOL,
    FINITE_DIFFERENCE_STEP,
    Tolerance,
    derived_tolerance,
    largest_miss,
    tolerance,
)
from triptych.check import mistakes
from triptych.check.adapters import NoAutodiffError, quiet
from triptych.check.problems import Inputs, Problem, split_heads
from triptych.check.target import one_line

DTYPES = ("float64", "float32", "float16", "bfloat16")
STATUSES = ("PASS", "FAIL", "NOTE", "SKIP")
SHRINK_CALLS = 60
"""At most this many inputs beyond --examples go into shrinking a failure."""
POISONS = (math.nan, math.inf, -math.inf)


@dataclass(frozen=True)
class Settings:
    """What the user asked for: dtypes, examples per property, the seed."""

    dtypes: tuple[str, ...] = DTYPES
    examples: int = 20
    seed: int = 0
    judge: str | None = None  # see `judged`

    @property
    def working(self) -> str:
        """The dtype of the properties that are not about a dtype."""
        return "float64" if "float64" in self.dtypes else self.dtypes[0]

    @property
    def tol(self) -> str:
        """The dtype whose tolerance those properties are judged by."""
        return self.judge or self.working


@dataclass
class Finding:
    """Why one input breaks a property."""

    message: str
    largest: float | None = None
    index: tuple[int, ...] | None = None
    got: float | None = None
    expected: float | None = None
    raised: bool = False


@dataclass
class Result:
    """One property of one target.

    Attributes:
        id: e.g. "oracle:float32", "causality". title: what it claims.
        status: PASS, FAIL, NOTE or SKIP. reason: one line.
        diagnosis: what a failure looks like, where a known pattern fits.
        smallest: the smallest failing input ("text" and its fields).
        finding: the failure on it. tried: inputs tried (shrinking included).
    """

    id: str
    title: str
    status: str
    reason: str
    diagnosis: str | None = None
    smallest: dict[str, Any] | None = None
    finding: Finding | None = None
    tried: int = 0

    def to_json(self) -> dict[str, Any]:
        return json_safe(asdict(self))


def json_safe(value):
    """NaN and Inf as null (as in triptych run's results.json), tuples as
    lists: what JSON holds."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


class Case(NamedTuple):
    """A drawn problem and what else a property draws (a position, a poison)."""

    problem: Problem
    extra: tuple = ()


class Search(NamedTuple):
    """What a search found: the smallest failing case (None: none failed)."""

    tried: int
    raised: int
    case: Case | None
    finding: Finding | None


# Searching -------------------------------------------------------------------


def search(strategy, check: Callable[[Case], Finding | None], settings) -> Search:
    """Run `check` on `settings.examples` drawn cases; shrink a failure to
    the smallest case hypothesis finds (at most SHRINK_CALLS more calls).

    `check` returns None when the case holds; an exception it raises is the
    implementation's, a failure of that case.
    """
    from hypothesis import HealthCheck, Phase, Verbosity, given, seed
    from hypothesis import settings as hypothesis_settings

    seen: dict[Case, Finding | None] = {}
    last: list[Case] = []
    counts = {"raised": 0}

    class FailingCaseError(Exception):
        pass

    def test(case):
        if case not in seen:
            if len(seen) >= settings.examples + SHRINK_CALLS:
                return  # out of budget: keep the smallest failure so far
            seen[case] = guarded(check, case)
            counts["raised"] += bool(seen[case] and seen[case].raised)
        if seen[case] is not None:
            last[:] = [case]
            raise FailingCaseError

    run = seed(settings.seed)(
        hypothesis_settings(
            max_examples=settings.examples,
            database=None,
            deadline=None,
            derandomize=False,
            phases=[Phase.generate, Phase.shrink],
            suppress_health_check=list(HealthCheck),
            report_multiple_bugs=False,
            verbosity=Verbosity.quiet,
        )(given(strategy)(test))
    )
    with contextlib.suppress(FailingCaseError):
        run()
    case = last[0] if last else None
    return Search(len(seen), counts["raised"], case, seen.get(case))


def guarded(check, case) -> Finding | None:
    """check(case), an exception turned into a Finding."""
    try:
        return check(case)
    except Exception as error:
        return Finding(f"raises {one_line(error)}", raised=True)


def problems(
    adapter,
    *,
    T=(1, 8),
    D=(1, 4),
    masks=("none",),
    heads=(1, 2, 4),
    batches=((), (1,), (2,), (2, 1)),
):
    """A hypothesis strategy of Problems that fit the adapter (its fixed widths,
    one head, how many batch axes). Every list is in the order shrinking
    prefers: the simplest first."""
    from hypothesis import strategies as st

    if adapter.fixed is not None:
        C, H = adapter.fixed
        H_s, D_s = st.just(H), st.just(C // H)
    else:
        H_s = st.just(1) if adapter.one_head else st.sampled_from(heads)
        D_s = st.sampled_from(range(D[0], D[1] + 1))
    batches = [b for b in batches if len(b) <= adapter.max_batch] or [()]
    return st.builds(
        Problem,
        batch=st.sampled_from(batches),
        T=st.sampled_from(range(T[0], T[1] + 1)),
        H=H_s,
        D=D_s,
        seed=st.integers(0, 2**16 - 1),
        mask=st.sampled_from(masks),
    )


def cases(problem_strategy, *extras):
    """Cases of the problems and one draw of each strategy in `extras`."""
    from hypothesis import strategies as st

    return st.builds(lambda p, *e: Case(p, tuple(e)), problem_strategy, *extras)


def rich_problem(adapter, mask: str = "none") -> Problem:
    """A fixed problem with room for every mistake to show: two batch items
    (where the signature takes them), T = 6, two heads of width 3."""
    if adapter.fixed is not None:
        C, H = adapter.fixed
        D = C // H
    else:
        H, D = (1, 4) if adapter.one_head else (2, 3)
    batch = (2,) if adapter.max_batch >= 1 else ()
    return Problem(batch, 6, H, D, 2024, mask)


# Comparing -------------------------------------------------------------------


def compare(what, got, expected, tol, rows=None) -> Finding | None:
    """None when `got` agrees with `expected` within `tol` (a dtype or a
    Tolerance) on `rows` (booleans over all but the last axis; None: all)."""
    got, expected = np.asarray(got), np.asarray(expected)
    if got.shape != expected.shape:
        return Finding(f"{what} has shape {got.shape}, expected {expected.shape}")
    if rows is not None:
        got = np.where(rows[..., None], got, expected)
    miss = largest_miss(got, expected, tol)
    if miss is None:
        return None
    name = "derived" if isinstance(tol, Tolerance) else tol
    return Finding(
        f"{what}: largest |difference| {miss.difference:.3g}, beyond the {name} "
        f"tolerance; at {miss.index} got {miss.got:.6g}, expected {miss.expected:.6g}",
        miss.difference,
        miss.index,
        miss.got,
        miss.expected,
    )


def agree(got, want, tol, rows=None, weights_rows=None) -> Finding | None:
    """The output, then the weights (where returned), against the truth."""
    found = compare("out", got.out, want.out, tol, rows)
    if found is None and got.weights is not None:
        found = compare("weights", got.weights, want.weights, tol, weights_rows)
    return found


def tolerance_text(dtype: str) -> str:
    atol, rtol = tolerance(dtype)
    return f"the {dtype} tolerance (atol = rtol = {atol:g})" if atol == rtol else dtype


# The properties --------------------------------------------------------------


def passed(id, title, found: Search, claim: str) -> Result:
    return Result(
        id,
        title,
        "PASS",
        f"{claim} on {found.tried} inputs",
        None,
        None,
        None,
        found.tried,
    )


def failed(
    id, title, found: Search, diagnosis=None, status="FAIL", reason=None, where=None
) -> Result:
    """The Result of a search that found a failing case; `where` says what
    the case drew beside its problem (e.g. ", x changed after position 2")."""
    finding = found.finding
    if reason is None:
        reason = finding.message
        if found.raised == found.tried:
            what = finding.message.removeprefix("raises ")
            reason = f"raises on every input ({found.tried} tried): {what}"
    smallest = {
        "text": found.case.problem.text() + (where(found.case) if where else ""),
        **found.case.problem._asdict(),
    }
    smallest["batch"] = list(smallest["batch"])
    return Result(id, title, status, reason, diagnosis, smallest, finding, found.tried)


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


def changed_after(inputs: Inputs, i: int, seed: int) -> Inputs:
    """The inputs with fresh x at every position after i."""
    x = inputs.x.copy()
    fresh = np.random.default_rng(seed + 1).standard_normal(x.shape)
    x[..., i + 1 :, :] = fresh[..., i + 1 :, :]
    return inputs.replace(x=x)


def agree_up_to(before, after, i, tol, what) -> Finding | None:
    """Outputs and weights of rows 0..i are the same in both."""
    found = compare(
        f"out up to position {i}, {what}",
        after.out[..., : i + 1, :],
        before.out[..., : i + 1, :],
        tol,
    )
    if found is None and before.weights is not None and after.weights is not None:
        found = compare(
            f"weights up to position {i}, {what}",
            after.weights[..., : i + 1, :],
            before.weights[..., : i + 1, :],
            tol,
        )
    return found


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


UNIFORM = ("uniform over all T keys", "uniform over the keys up to i")
"""The policies beside zeros and NaN: JAX's and flax's (masked scores a large
negative number, so a fully masked row is a row of equal scores), and the same
with the causal mask kept."""


def fully_masked_rows(adapter, settings: Settings) -> Result:
    """A query row that may attend no key: zeros (the contract), or which
    other policy (NaN, the uniform mean), in the output and the weights."""
    id, title = "fully masked rows", "fully masked rows: zeros, NaN or the uniform mean"
    if not adapter.takes_mask:
        return Result(id, title, "SKIP", "takes no mask: no row can be fully masked")
    dtype, tol = settings.working, settings.tol

    def check(case):
        inputs = case.problem.inputs()
        got, want = adapter.run(inputs, dtype), adapter.truth(inputs, dtype)
        policy = policy_of(adapter, inputs, got, dtype, tol)
        if policy != "zeros":
            return Finding(f"fully masked rows give {policy}")
        attends = inputs.allowed().any(axis=-1)
        return agree(got, want, tol, ~empty_rows(adapter, inputs), attends)

    found = search(cases(problems(adapter, masks=("empty rows",))), check, settings)
    if found.case is None:
        return passed(id, title, found, "zeros, as the contract says,")
    message = found.finding.message
    if found.finding.raised or not message.startswith("fully masked"):
        return failed(id, title, found)
    if "NaN" in message:
        diagnosis = "NaN from a fully masked row: softmax of a row of -inf is 0 / 0"
        return failed(id, title, found, diagnosis, reason=message)
    if all(part.split(" (")[0] in UNIFORM for part in policy_parts(message)):
        diagnosis = (
            "the policy of jax.nn.dot_product_attention and flax: masked scores "
            "are a large negative number, not -inf"
        )
        return failed(id, title, found, diagnosis, "NOTE", message)
    diagnosis = "none of the known policies (zeros, NaN, a uniform mean)"
    return failed(id, title, found, diagnosis, reason=message)


def policy_parts(message: str) -> list[str]:
    """'fully masked rows give A (out), B (weights)' -> ['A (out)', 'B (weights)']."""
    return message.removeprefix("fully masked rows give ").split(", ")


def empty_rows(adapter, inputs: Inputs) -> np.ndarray:
    """The rows of out (at the adapter's level) whose query may attend nothing."""
    attends = inputs.allowed().any(axis=-1)  # (..., H, T)
    return ~attends if adapter.level == "qkv" else ~attends.any(axis=-2)


def policy_of(adapter, inputs: Inputs, got, dtype: str, tol: str) -> str:
    """Which policy the empty rows of out (and of the weights) follow: 'zeros',
    'NaN', one of UNIFORM, 'something else', or 'A (out), B (weights)'."""
    w = {**inputs.w, "w_q": np.zeros_like(inputs.w["w_q"])}  # every score 0
    flat = inputs.replace(w=w, mask=None)
    level = (adapter.level, adapter.one_head)
    up_to_i = mistakes.mistaken(None, flat, dtype, *level)
    every = mistakes.mistaken(mistakes.BY_NAME["not causal"], flat, dtype, *level)
    empty = empty_rows(adapter, inputs)
    found = {"out": policy(got.out[empty], every.out[empty], up_to_i.out[empty], tol)}
    if got.weights is not None:
        empty = ~inputs.allowed().any(axis=-1)  # (..., H, T)
        found["weights"] = policy(
            got.weights[empty], every.weights[empty], up_to_i.weights[empty], tol
        )
    if len(set(found.values())) == 1:
        return found["out"]
    return ", ".join(f"{name} ({what})" for what, name in found.items())


def policy(rows, uniform_all, uniform_up_to_i, tol) -> str:
    """The policy of some fully masked rows, given what each uniform one gives."""
    if rows.size == 0 or np.all(rows == 0.0):
        return "zeros"
    if np.all(np.isnan(rows)):
        return "NaN"
    if compare("", rows, uniform_all, tol) is None:
        return UNIFORM[0]
    if compare("", rows, uniform_up_to_i, tol) is None:
        return UNIFORM[1]
    return "something else"


def nan_behind_mask(adapter, settings: Settings) -> Result:
    """NaN or Inf in x after position i (behind the causal mask), or in the
    padding (behind a key-padding mask), leaves the earlier rows as they were."""
    id, title = "NaN behind the mask", "a NaN or Inf behind the mask changes nothing"
    dtype, tol = settings.working, settings.tol
    from hypothesis import strategies as st

    kinds = ("causal", "padding") if adapter.takes_mask else ("causal",)

    def check(case):
        problem, (position, poison, kind) = case
        i = position % (problem.T - 1)
        inputs = problem.inputs()
        if kind == "padding":
            *batch, T, _ = inputs.x.shape
            keep = np.arange(T) < i + 1
            inputs = inputs.replace(
                mask=np.broadcast_to(keep, (*batch, 1, 1, T)).copy()
            )
        x = inputs.x.copy()
        x[..., i + 1 :, :] = poison
        clean, poisoned = (
            adapter.run(inputs, dtype),
            adapter.run(inputs.replace(x=x), dtype),
        )
        return agree_up_to(
            clean, poisoned, i, tol, f"after {poison} from position {i + 1}"
        )

    strategy = cases(
        problems(adapter, T=(2, 8)),
        st.integers(0, 6),
        st.sampled_from(POISONS),
        st.sampled_from(kinds),
    )

    def where(case):
        position, poison, kind = case.extra
        i = position % (case.problem.T - 1)
        return f", {poison} in x after position {i} (behind the {kind} mask)"

    found = search(strategy, check, settings)
    if found.case is None:
        return passed(id, title, found, "earlier rows unchanged")
    if found.finding.raised:
        return failed(id, title, found, where=where)
    return failed(
        id, title, found, leak_of(adapter, found.case, dtype, tol), where=where
    )


def leak_of(adapter, case: Case, dtype: str, tol: str) -> str:
    """Where the poison got in: the future itself, when a finite change there
    reaches the earlier rows too (not causal); for q, k, v apart, the value
    or the key; else what a plain weighted sum does."""
    problem, (position, poison, kind) = case
    i = position % (problem.T - 1)
    behind = f"the {kind} mask"
    inputs = problem.inputs()
    if kind == "causal":
        before = adapter.run(inputs, dtype)
        after = adapter.run(changed_after(inputs, i, problem.seed), dtype)
        if agree_up_to(before, after, i, tol, "") is not None:
            return "not causal: a finite change in the future reaches earlier rows too"
    if adapter.level == "qkv" and kind == "causal":
        arrays = adapter.arrays(inputs, dtype)
        for name, word, why in (
            ("v", "value", "0 * NaN = NaN in weights @ v"),
            ("k", "key", "the mask is added to the scores: NaN + -inf = NaN"),
        ):
            poisoned = {**arrays, name: arrays[name].copy()}
            poisoned[name][..., i + 1 :, :] = poison
            args = {
                n: adapter.backend.from_numpy(a, dtype) for n, a in poisoned.items()
            }
            try:
                with quiet():
                    out = adapter.outcome(
                        adapter.call(args, None, problem.H, dtype), inputs
                    )
            except Exception:
                continue
            if not np.all(np.isfinite(out.out[..., : i + 1, :])):
                return f"a {poison} {word} behind {behind} reaches earlier rows: {why}"
    return (
        f"a NaN or Inf behind {behind} reaches earlier rows: a plain weights @ v "
        f"computes 0 * NaN = NaN (and a mask added to the scores NaN + -inf = NaN)"
    )


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
        plain = plain_at_level(adapter, inputs, dtype)
        found = compare(
            "out", got.out, want.out, derived_tolerance(plain[0], want.out, dtype)
        )
        if found is None and got.weights is not None:
            found = compare(
                "weights",
                got.weights,
                want.weights,
                derived_tolerance(plain[1], want.weights, dtype),
            )
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


def plain_at_level(adapter, inputs: Inputs, dtype: str):
    """A plain computation in `dtype` at the adapter's level: (out, weights)."""
    from shared.dtypes import np_dtype

    cast = {
        n: a.astype(np_dtype(dtype)) for n, a in adapter.arrays(inputs, dtype).items()
    }
    if adapter.level == "qkv":
        out, weights = plain_attention(cast["q"], cast["k"], cast["v"])
    elif adapter.one_head:
        q, k, v = (
            split_heads((cast["x"] @ cast[n]).astype(cast["x"].dtype), 1)
            for n in ("w_q", "w_k", "w_v")
        )
        out, weights = plain_attention(q, k, v)
        out = out[..., 0, :, :]
    else:
        out, weights = plain_multi_head(
            cast["x"], cast["w_q"], cast["w_k"], cast["w_v"], cast["w_o"], inputs.H
        )
    return out.astype(np.float64), weights.astype(np.float64)


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


PROPERTIES = {
    "causality": causality,
    "rows sum to 1": rows_sum_to_one,
    "scale": scale,
    "mask": mask,
    "independence": independence,
    "fully masked rows": fully_masked_rows,
    "NaN behind the mask": nan_behind_mask,
    "hostile magnitudes": hostile,
    "determinism": determinism,
    "gradients": gradients,
}
"""The properties beside oracle:<dtype>, in the order they are reported."""


def property_ids(settings: Settings) -> list[str]:
    """Every property id: oracle:<dtype> for each dtype, then PROPERTIES."""
    return [f"oracle:{d}" for d in settings.dtypes] + list(PROPERTIES)


JUDGED = (
    "causality",
    "rows sum to 1",
    "scale",
    "mask",
    "independence",
    "fully masked rows",
    "NaN behind the mask",
)
"""The properties held to the tolerance of the working dtype (`judged`)."""


def run_property(adapter, settings: Settings, id: str) -> Result:
    """One property by id."""
    if id.startswith("oracle:"):
        return oracle(adapter, settings, id.removeprefix("oracle:"))
    judge = judged(adapter, settings)
    result = PROPERTIES[id](adapter, dataclasses.replace(settings, judge=judge))
    if judge != settings.working and id in JUDGED and result.status != "SKIP":
        result.reason += (
            f" (judged at the {judge} tolerance: it computes in {judge} inside, "
            f"see oracle:{settings.working})"
        )
    return result


def judged(adapter, settings: Settings) -> str:
    """The dtype whose tolerance the properties beyond oracle:<dtype> judge
    by: the working dtype, or float32 where float64 inputs agree with the
    oracle at float32's tolerance only (JAX's kernels compute in float32
    inside), so that one known deviation is not reported as every property's
    failure. Found once per adapter, on a rich problem."""
    if adapter.judged is None:
        adapter.judged = settings.working
        if settings.working == "float64":
            inputs = rich_problem(adapter).inputs()
            with contextlib.suppress(Exception):  # its raising is a property's
                got, want = (
                    adapter.run(inputs, "float64"),
                    adapter.truth(inputs, "float64"),
                )
                if agree(got, want, "float64") and not agree(got, want, "float32"):
                    adapter.judged = "float32"
    return adapter.judged
