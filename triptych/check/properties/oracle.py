"""The first property of causal self-attention: it equals the float64 oracle
in each dtype (`oracle`), on the inputs rounded to that dtype. Where no known
mistake fits a failure, the rows it is right up to (a block or tile edge) or
a float32 computation inside float64 inputs say what is wrong.
"""

from __future__ import annotations

import numpy as np

from triptych.check.properties.search import (
    Case,
    Result,
    Search,
    Settings,
    agree,
    cases,
    compare,
    diagnosis_of,
    failed,
    passed,
    problems,
    refuses,
    search,
    tolerance_text,
)


def oracle(adapter, settings: Settings, dtype: str) -> Result:
    """Output and weights equal the oracle on the inputs rounded to `dtype`."""
    id, title = f"oracle:{dtype}", f"equals the float64 oracle in {dtype}"
    refused = refuses(adapter, dtype)
    if refused:
        return Result(
            id,
            title,
            "SKIP",
            f"NumPy has no {dtype} of its own, and this implementation refuses "
            f"ml_dtypes' ({refused})",
        )

    inside: list = []  # (problem, finding) where float64 agrees at float32 only

    def check(case):
        inputs = case.problem.inputs()
        got, want = adapter.run(inputs, dtype), adapter.truth(inputs, dtype)
        found = agree(got, want, dtype)
        float64 = found is not None and dtype == "float64"
        if float64 and agree(got, want, "float32") is None:  # judged per problem
            inside.append((case.problem, found))
            return None
        return found

    role = None if dtype == settings.working else "dtypes"
    found = search(cases(problems(adapter, settings, role)), check, settings)
    if found.case is None and inside:
        return float32_note(id, title, found, inside)
    if found.case is None:
        return passed(id, title, found, f"within {tolerance_text(dtype)}")
    if found.finding.raised:
        return failed(id, title, found)
    diagnosis = diagnosis_of(adapter, found.case, dtype)
    return failed(id, title, found, diagnosis or wrong_from(adapter, found.case, dtype))


def float32_note(id, title, found: Search, inside: list) -> Result:
    """The NOTE of float64 inputs that agree with the oracle at float32's
    tolerance only on some problems (and at float64's on the rest): what was
    measured, on which sizes; the smallest such problem shown."""
    problem, finding = min(inside, key=lambda pair: (pair[0].T, pair[0].C))
    sizes = sorted({(p.H, p.D) for p, _ in inside})
    at = ", ".join(f"H = {H}, D = {D}" for H, D in sizes)
    largest = max(f.largest for _, f in inside)
    diagnosis = (
        f"computes in float32 inside (or adds a small constant of its own, an "
        f"eps): on {len(inside)} of {found.tried} inputs ({at}) its float64 "
        f"result is off the oracle by up to {largest:.2g}, within the float32 "
        f"tolerance; the other properties hold those problems to float32's"
    )
    reason = f"agrees only within the float32 tolerance: {finding.message}"
    note = failed(id, title, Search(found.tried, 0, Case(problem), finding),
                  diagnosis, "NOTE", reason)  # fmt: skip
    return note


def wrong_from(adapter, case: Case, dtype: str) -> str | None:
    """Where no known mistake fits: 'right up to row 15, wrong from row 16
    on', when the first rows agree with the oracle (a block or tile edge)."""
    inputs = case.problem.inputs()
    try:
        got, want = adapter.run(inputs, dtype), adapter.truth(inputs, dtype)
    except Exception:
        return None
    T = inputs.x.shape[-2]
    for i in range(T):
        rows = np.zeros(got.out.shape[:-1], dtype=bool)
        rows[..., i] = True
        if compare("", got.out, want.out, dtype, rows) is not None:
            break
    else:
        return None
    if i == 0:
        return None
    if i == 1:  # row 0 attends key 0 alone, its weight 1 whatever its score
        return (
            "right at row 0 only, wrong from row 1 on: row 0 attends key 0 "
            "alone (weight 1 whatever its score), so the scores, or a key or "
            "value past position 0, are wrong"
        )
    edge = " (a block or tile edge?)" if i >= BLOCK and i & (i - 1) == 0 else ""
    return f"right up to row {i - 1}, wrong from row {i} on{edge}"


BLOCK = 8
"""The smallest block or tile a kernel is written with (FlashAttention's
are 16 to 128): wrong from row 2 or 4 on is no block's edge."""
