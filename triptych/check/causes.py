"""One cause per mistake, the news first: a target's FAIL rows folded under
the cause that explains them (`causes`), which check's report prints at the
top of the target, results.json keeps (`causes` of each target), --grade
gives in words and exercises/grade.py prints; and what a raise on the
target's own line says (`raised_hint`: `.T` where `.mT` belongs).

The rule (docs/check.md#diagnoses): a row's cause is its diagnosis, else its
reason; rows with the same cause are one. A target that runs on x (T, C)
and raises on the batched x that --batch or its docstring asks for has that
as its first cause, and every row that raises folds under it; a row that
says "the forward is already wrong" is no news either, and folds under the
first cause.
"""

from __future__ import annotations

import re
import sysconfig
import traceback
from pathlib import Path

TRANSPOSE = "`.T` reverses every axis where `.mT` swaps the last two"
EVERY_INPUT = re.compile(r"^raises on every input \(\d+ tried\): ")
"""A raise on every input drawn and the same raise on one are one cause."""
CONSEQUENCE = "the forward is already wrong"
"""How a row starts whose failure follows from a wrong forward (see oracle)."""
INSTALLED = ("stdlib", "purelib", "platlib")
LIBRARIES = (
    *(str(Path(sysconfig.get_paths()[name]).resolve()) for name in INSTALLED),
    str(Path(__file__).resolve().parent),
)
"""Where a frame is not the target's own: Python, the installed packages
(numpy, torch, jax) and this package, which calls the target."""


def causes(properties: list[dict], batch_broken: str = "") -> list[dict]:
    """[{"cause": text, "properties": [ids]}] of a target's property results
    (results.json's), in order, the first cause first. `batch_broken` is the
    adapter's ("runs on x (T, C) and raises ValueError on x (B, T, C), though
    x (..., T, C) is asked for (--batch any)"), empty where none; the
    raising rows' diagnosis, where one names the line (`raised_hint`), goes
    before it."""
    found: dict[str, list[str]] = {batch_broken: []} if batch_broken else {}
    hints = []
    for result in properties:
        if result["status"] != "FAIL":
            continue
        text = result["diagnosis"] or EVERY_INPUT.sub("raises ", result["reason"])
        if batch_broken and raises(result):  # not news: the batched x raises
            text = batch_broken
            hints += [result["diagnosis"]] if result["diagnosis"] else []
        elif text.startswith(CONSEQUENCE) and found:
            text = next(iter(found))
        found.setdefault(text, []).append(result["id"])
    listed = [{"cause": text, "properties": ids} for text, ids in found.items()]
    if hints and listed[0]["cause"] == batch_broken:
        listed[0]["cause"] = f"{hints[0]}: it {batch_broken}"
    return [cause for cause in listed if cause["properties"]]


def raises(result: dict) -> bool:
    """Whether a property failed because the target raised."""
    finding = result.get("finding") or {}
    return bool(finding.get("raised")) or result["reason"].startswith(
        ("raises ", "raises on every input")
    )


def raised(error: BaseException) -> str:
    """'raises AttributeError: message', and where in the target's own code
    it was raised: ' (answer.py, line 24: `causal = np.trill(...)`)', so
    that a student finds the line (none where the raise is a library's
    alone, or this package's)."""
    from triptych.check.target import one_line

    found = own_line(error)
    where = "" if found is None else f" ({found[0]}, line {found[1]}: `{found[2]}`)"
    return f"raises {one_line(error)}{where}"


def own_line(error: BaseException) -> tuple[str, int, str, dict] | None:
    """(file name, line number, source line, its frame's locals) of the last
    frame of the error's traceback in the target's own code (not Python's,
    an installed package's or this package's); None if there is none."""
    import linecache

    for frame, number in reversed(list(traceback.walk_tb(error.__traceback__))):
        filename = frame.f_code.co_filename
        line = linecache.getline(filename, number).strip()
        if not str(Path(filename).resolve()).startswith(LIBRARIES) and line:
            return Path(filename).name, number, line, frame.f_locals
    return None


def raised_hint(error: BaseException) -> str | None:
    """What a raise says of its cause where the target's own line tells:
    `.T` on that line (right for a 2-D array only) where `.mT` belongs, of
    an array of 3 axes or more (where the line names it: `k.T`)."""
    found = own_line(error)
    if found is None:
        return None
    name, number, line, names = found
    operands = re.findall(r"(?:(\w+)|\))\.T\b", line)  # "" for (x @ w).T
    if not operands:
        return None
    axes = [getattr(names.get(o), "ndim", None) for o in operands]
    if all(n is not None and n < 3 for n in axes):  # 2-D: `.T` is right there
        return None
    return f"{TRANSPOSE} ({name}, line {number}: `{line}`)"


def of(report) -> list[dict]:
    """A report's causes: those the run found (`runner.check`), else those
    of its properties alone."""
    found = getattr(report, "causes", None)
    return causes(report.properties) if found is None else found


def name(i: int, listed: list) -> str:
    """'cause', or 'cause 2' where a target has several."""
    return f"cause {i + 1}" if len(listed) > 1 else "cause"


def folded(properties: list[dict], listed: list[dict]) -> list[dict]:
    """The property results as the report shows them under their causes: a
    diagnosis that a cause above says already points at it ("the cause
    above", "cause 2 above") instead of saying it again."""
    shown = []
    for result in properties:
        diagnosis, reason = result["diagnosis"], result["reason"]
        for i, cause in enumerate(listed):
            if result["id"] not in cause["properties"]:
                continue
            pointer = f"the {name(i, listed)} above"
            if diagnosis and diagnosis in cause["cause"]:
                diagnosis = pointer
            if reason.startswith("raises "):  # the same exception in every row
                reason, diagnosis = reason.split(":")[0], diagnosis or pointer
            break
        shown.append({**result, "diagnosis": diagnosis, "reason": reason})
    return shown


def plain(report, width: int) -> list[str]:
    """The causes at the top of a target in plain text: 'cause: TEXT', then
    'explains ID, ID', wrapped at `width` under their indent."""
    import textwrap

    from triptych.common.prose import WHOLE

    lines, listed = [], of(report)
    for i, cause in enumerate(listed):
        lead = f"  {name(i, listed)}: "
        for first, text in (
            (lead, cause["cause"]),
            (" " * len(lead), "explains " + ", ".join(cause["properties"])),
        ):
            lines += textwrap.wrap(
                text, width, initial_indent=first, subsequent_indent=" " * len(lead),
                **WHOLE,
            )  # fmt: skip
    return lines


def in_words(report, short: dict[str, str]) -> list[str]:
    """--grade's why: each cause with the properties it explains (by their
    `short` names), 'f64, f32, scale: scores not divided by sqrt(D)'; then
    the variant options it went unchecked without."""
    found = [
        f"{', '.join(short.get(id, id) for id in cause['properties'])}: "
        f"{cause['cause']}"
        for cause in of(report)
    ]
    unchecked = getattr(report, "unchecked", None)
    if unchecked:
        found.append(f"variant unchecked: needs {' or '.join(unchecked)}")
    return found
