"""Searching and comparing, what every property is made of: the settings,
a Finding and a Result, hypothesis's search for the smallest failing case
(`search`), the problems it draws, the comparison with the oracle within a
dtype's tolerance (`compare`, `agree`), and a search's Result (`passed`,
`failed`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

import numpy as np

from shared import registry
from shared.tolerances import Tolerance, largest_miss, tolerance
from triptych.check import mistakes
from triptych.check.causes import raised, raised_hint
from triptych.check.problems import MAX_T, Inputs, Problem, catalogue, fit
from triptych.check.target import one_line
from triptych.check.variant import Variant

DTYPES = ("float64", "float32", "float16", "bfloat16")
STATUSES = ("PASS", "FAIL", "NOTE", "SKIP")
SHRINK_CALLS = 60
"""At most this many inputs beyond --examples go into shrinking a failure."""


@dataclass(frozen=True)
class Settings:
    """What the user asked for: dtypes, examples per property, the seed, the
    profile (default, strict or course: what is a FAIL and what a NOTE) and
    the largest block edge drawn (--max-t)."""

    dtypes: tuple[str, ...] = DTYPES
    examples: int = 20
    seed: int = 0
    judge: str | None = None  # the tolerance's dtype, if not the working one
    profile: str = "default"
    max_t: int = MAX_T
    variant: Variant | None = None  # the variant options (docs/check.md#variants)

    @property
    def strict(self) -> bool:
        """This project's own policies asked for (--profile strict)."""
        return self.profile == "strict"

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
    hint: str | None = None  # what a raise says of its cause (causes.raised_hint)


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
        message, hint = raised(error), raised_hint(error)
        return Finding(message, raised=True, hint=hint)


def shapes(adapter, settings, role=None, *, min_T=1, min_D=1, several=False):
    """The (batch, T, H, D) of the catalogue (`problems.catalogue`) fitted to
    the adapter (its batch axes, one head, its own widths), simplest first:
    those with `role` (every one in the working dtype: role None), T >= min_T,
    D >= min_D, and with `several`, two batch items or two heads. Where no
    shape of the role fits, those of every role that do."""
    found: dict = {}
    for only_role in (True, False):
        window = adapter.variant and adapter.variant.window
        for shape in catalogue(settings.max_t, window):
            if only_role and role is not None and role not in shape.roles:
                continue
            fitted = fit(
                shape,
                adapter.batch_ranks,
                adapter.one_head,
                adapter.fixed,
                adapter.variant,
            )
            batch, length, heads, width, _ = fitted
            if length < min_T or width < min_D:
                continue
            if several and not (heads > 1 or (batch and batch[0] > 1)):
                continue
            found.setdefault(fitted, None)
        if found:
            break
    return list(found)


def problems(adapter, settings, role=None, *, masks=("none",), **needs):
    """A hypothesis strategy of Problems: a shape of `shapes(adapter,
    settings, role, **needs)`, a seed and a kind of mask of `masks`, each list
    in the order shrinking prefers (the simplest first). None if no shape
    fits."""
    from hypothesis import strategies as st

    found = shapes(adapter, settings, role, **needs)
    if not found:
        return None
    return st.builds(
        lambda shape, seed, mask: Problem(
            *shape[:4], seed, mask, adapter.variant, shape[4]
        ),
        st.sampled_from(found),
        st.integers(0, 2**16 - 1),
        st.sampled_from(masks),
    )


def cases(problem_strategy, *extras):
    """Cases of the problems and one draw of each strategy in `extras`."""
    from hypothesis import strategies as st

    return st.builds(lambda p, *e: Case(p, tuple(e)), problem_strategy, *extras)


def rich_problem(adapter, mask: str = "none") -> Problem:
    """A fixed problem with room for every mistake to show, a shape of the
    catalogue: two batch items (where the signature takes them), T = 6, two
    heads of width 3."""
    from triptych.check.problems import SMALL_SHAPES

    rich = next(s for s in SMALL_SHAPES if s.T == 6)
    batch, T, H, D, width = fit(
        rich, adapter.batch_ranks, adapter.one_head, adapter.fixed, adapter.variant
    )
    return Problem(batch, T, H, D, 2024, mask, adapter.variant, width)


def changed_after(inputs: Inputs, i: int, seed: int) -> Inputs:
    """The inputs with fresh x at every position after i."""
    x = inputs.x.copy()
    fresh = np.random.default_rng(seed + 1).standard_normal(x.shape)
    x[..., i + 1 :, :] = fresh[..., i + 1 :, :]
    return inputs.replace(x=x)


def refuses(adapter, dtype: str) -> str | None:
    """Why a NumPy implementation cannot be checked in bfloat16, the dtype
    NumPy itself lacks (ml_dtypes adds it, and np.einsum, np.linalg and
    others refuse it): the TypeError it raises on the rich problem; None
    where it takes the dtype (found once per adapter)."""
    if not registry.get(adapter.framework).arrays.numpy or dtype != "bfloat16":
        return None
    if dtype not in adapter.refused:
        adapter.refused[dtype] = None
        try:
            adapter.run(rich_problem(adapter).inputs(), dtype)
        except TypeError as error:
            adapter.refused[dtype] = one_line(error)
        except Exception:
            pass
    return adapter.refused[dtype]


# Comparing -------------------------------------------------------------------


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
    return mistakes.named(adapter, observed, dtype, tol or dtype, names)


def compare(what, got, expected, tol, rows=None) -> Finding | None:
    """None when `got` agrees with `expected` within `tol` (a dtype or a
    Tolerance) on `rows` (booleans over all but the last axis; None: all)."""
    got, expected = np.asarray(got), np.asarray(expected)
    if got.shape != expected.shape:
        return Finding(f"{what} has shape {got.shape}, expected {expected.shape}")
    if rows is not None:
        got = np.where(rows[..., None], got, expected)
    both = np.isnan(got) & np.isnan(expected)  # the same NaN: no difference
    got = np.where(both, 0.0, got)
    expected = np.where(both, 0.0, expected)
    miss = largest_miss(got, expected, tol)
    if miss is None:
        return None
    name = "derived" if isinstance(tol, Tolerance) else tol
    shown, wanted = apart(miss.got, miss.expected)
    return Finding(
        f"{what}: largest |difference| {miss.difference:.3g}, beyond the {name} "
        f"tolerance; at {miss.index} got {shown}, expected {wanted}",
        miss.difference,
        miss.index,
        miss.got,
        miss.expected,
    )


def apart(got: float, expected: float) -> tuple[str, str]:
    """got and expected with the digits that tell them apart (6 at least):
    1.00000009 and 1, not 1 and 1."""
    digits = 6
    while f"{got:.{digits}g}" == f"{expected:.{digits}g}" and digits < 17:
        digits += 1
    return f"{got:.{digits}g}", f"{expected:.{digits}g}"


def agree(got, want, tol, rows=None, weights_rows=None) -> Finding | None:
    """The output, then the weights (where returned), against the truth."""
    found = compare("out", got.out, want.out, tol, rows)
    if found is None and got.weights is not None:
        found = compare("weights", got.weights, want.weights, tol, weights_rows)
    return found


def agree_up_to(before, after, i, tol, what) -> Finding | None:
    """Rows 0..i of out and weights the same in both; `what`: how after differs."""
    rows = "row 0" if i == 0 else f"rows 0 to {i}"
    found = compare(
        f"{rows} of out, {what}",
        after.out[..., : i + 1, :],
        before.out[..., : i + 1, :],
        tol,
    )
    if found is None and before.weights is not None and after.weights is not None:
        found = compare(
            f"{rows} of the weights, {what}",
            after.weights[..., : i + 1, :],
            before.weights[..., : i + 1, :],
            tol,
        )
    return found


def tolerance_text(dtype: str) -> str:
    atol, rtol = tolerance(dtype)
    return f"the {dtype} tolerance (atol = rtol = {atol:g})" if atol == rtol else dtype


# Results ---------------------------------------------------------------------


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
    diagnosis = diagnosis or finding.hint  # a raise on a line that tells
    if reason is None:
        reason = finding.message
        if found.raised == found.tried:
            what = finding.message.removeprefix("raises ")
            reason = f"raises on every input ({found.tried} tried): {what}"
    smallest = {
        "text": found.case.problem.text() + (where(found.case) if where else ""),
        **found.case.problem._asdict(),
    }
    del smallest["variant"]  # the run's, in the settings
    smallest["batch"] = list(smallest["batch"])
    return Result(id, title, status, reason, diagnosis, smallest, finding, found.tried)
