"""The property of calling it twice: the same input gives the same bits
(`determinism`; a random draw inside, dropout left on, does not)."""

from __future__ import annotations

import numpy as np

from triptych.check.properties.search import (
    Finding,
    Result,
    Settings,
    cases,
    failed,
    passed,
    problems,
    search,
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

    found = search(cases(problems(adapter, settings)), check, settings)
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
