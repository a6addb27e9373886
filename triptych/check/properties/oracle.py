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
    Settings,
    agree,
    cases,
    compare,
    diagnosis_of,
    failed,
    passed,
    problems,
    refuses,
    rich_problem,
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

    def check(case):
        inputs = case.problem.inputs()
        return agree(adapter.run(inputs, dtype), adapter.truth(inputs, dtype), dtype)

    role = None if dtype == settings.working else "dtypes"
    found = search(cases(problems(adapter, settings, role)), check, settings)
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
    diagnosis = diagnosis_of(adapter, found.case, dtype)
    return failed(id, title, found, diagnosis or wrong_from(adapter, found.case, dtype))


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
    edge = " (a block or tile edge?)" if i & (i - 1) == 0 else ""
    return f"right up to row {i - 1}, wrong from row {i} on{edge}"


def float32_inside(adapter, case: Case) -> bool:
    """Whether float64 inputs agree with the oracle at float32's tolerance only."""
    for problem in (case.problem, rich_problem(adapter)):
        inputs = problem.inputs()
        got, want = adapter.run(inputs, "float64"), adapter.truth(inputs, "float64")
        if agree(got, want, "float32") is not None:
            return False
    return True
