"""Which batch axes a target takes, (T, C), (B, T, C) or any, found by
calling each candidate adapter on a small problem with each (`probe`), and
the first candidate that runs (`settled`)."""

from __future__ import annotations

import re

from triptych.check.adapters.base import JIT_OPTIONS, Adapter

PROBE_RANKS = (1, 0, 2)


class CannotCallError(Exception):
    """No candidate adapter ran on the probe: what each raised."""

    def __init__(self, errors: list[str]):
        super().__init__("; ".join(errors))
        self.errors = errors


def settled(
    adapters,
    batch: str,
    eager: bool,
    dtype: str,
    keep: bool,
    jit_options: dict | None = JIT_OPTIONS,
) -> Adapter:
    """The first adapter that runs on the probe, its batch axes set: those it
    runs with (batch "auto") or those `batch` names. Where none runs: the
    first if `keep` (the signature is named, or its parameters' names say it:
    what it raises is its own, for its properties to report); else
    CannotCallError."""
    errors = []
    for adapter in adapters:
        adapter.jit, adapter.jit_options = not eager, jit_options
        ranks = BATCH_OPTIONS.get(batch) or PROBE_RANKS
        found = probe(adapter, ranks, dtype)
        working = tuple(sorted(r for r, error in found.items() if error is None))
        promised = promised_ranks(adapter.target)
        if batch != "auto":
            adapter.batch_ranks, adapter.batch_found = tuple(sorted(ranks)), "given"
        elif working and promised and not set(promised) <= set(working):
            adapter.batch_ranks, adapter.batch_found = promised, "promised"
        elif working:
            adapter.batch_ranks, adapter.batch_found = working, "probed"
        adapter.batch_broken = broken(adapter, found)
        if working:
            return adapter
        errors.append(next(iter(found.values())))
    if keep:
        return adapters[0]
    raise CannotCallError(errors)


def broken(adapter, found: dict[int, str | None]) -> str:
    """Where the target runs on x (T, C) and fails on the batched x it is
    held to (--batch, its docstring), that as the first of its causes
    (triptych.check.causes): 'runs on x (T, C) and raises ValueError on x
    (B, T, C), though x (..., T, C) is asked for (--batch any)'; else ''."""
    held = [r for r in adapter.batch_ranks if r and found.get(r)]
    layout = adapter.layout()
    why = {
        "given": f"though {layout} is asked for (--batch any)",
        "promised": f"though its docstring promises {layout}",
    }.get(adapter.batch_found)
    if found.get(0, "") is not None or not held or why is None:
        return ""
    error = found[held[0]]
    what = (
        f"raises {error.split(':')[0]}"
        if not error.startswith("returned")
        else error.split(",")[0].replace("returned", "returns")
    )
    name, rest = ("q", "H, T, D") if adapter.level == "qkv" else ("x", "T, C")
    batch = {1: "B, ", 2: "B1, B2, "}[held[0]]
    return f"runs on {name} ({rest}) and {what} on {name} ({batch}{rest}), {why}"


PROMISES = {
    r"\(\s*\.\.\.\s*,\s*T\s*,\s*C\s*\)": (0, 1, 2),
    r"\(\s*B\s*,\s*T\s*,\s*C\s*\)": (1,),
}
"""What a docstring's shape of x promises: (..., T, C) any batch axes,
(B, T, C) one."""


def promised_ranks(target) -> tuple[int, ...] | None:
    """The batch axes a function's docstring promises x takes ("x (..., T,
    C)"), where it says: then the probe does not narrow them to those that
    run (a k.T that only (T, C) takes fails the properties, as the promise
    was broken), and the report says "as its docstring says"."""
    doc = getattr(target, "__doc__", None) if callable(target) else None
    if not doc or isinstance(target, type):
        return None
    for pattern, ranks in PROMISES.items():
        if re.search(pattern, doc):
            return ranks
    return None


BATCH_OPTIONS = {"none": (0,), "one": (1,), "any": (0, 1, 2)}
"""--batch: the batch axes x is given with (auto: those it runs with)."""


def batch_of(given: str | None, profile: str) -> str:
    """--batch as given, else its default: `any` under --profile course (a
    student's attention takes x (..., T, C), so a `k.T` where `k.mT`
    belongs fails, as exercises/grade.py grades it), else `auto`."""
    return given or ("any" if profile == "course" else "auto")


def probe(adapter, ranks, dtype: str = "float64") -> dict[int, str | None]:
    """Call the adapter on a small problem with each number of batch axes in
    `ranks` (the first small shape of the catalogue with that many and T >=
    2, so that JAX compiles nothing the properties do not): None where it
    runs and returns an output of the right shape, else what went wrong."""
    from triptych.check.problems import (
        BATCH_FORMS,
        SMALL_SHAPES,
        Problem,
        Shape,
        fit,
    )
    from triptych.check.target import one_line

    found = {}
    for rank in ranks:
        shape = next(
            (s for s in SMALL_SHAPES if s.rank == rank and s.T >= 2),
            Shape(2, 2, 2, rank),
        )
        batch, T, H, D, width = fit(
            shape, (rank,), adapter.one_head, adapter.fixed, adapter.variant
        )
        inputs = Problem(batch, T, H, D, 0, variant=adapter.variant, width=width)
        inputs = inputs.inputs()
        try:
            got = adapter.run(inputs, dtype)
            want = adapter.truth(inputs, dtype)
        except Exception as error:
            found[rank] = one_line(error)
            continue
        shape = tuple(BATCH_FORMS[rank]) + want.out.shape[len(batch) :]
        found[rank] = (
            None
            if got.out.shape == shape
            else f"returned out of shape {got.out.shape}, expected {shape}"
        )
    return found
