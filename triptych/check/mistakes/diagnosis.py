"""The diagnosis: which known mistakes a signature can show (`applicable`),
whether an implementation's results are attention with one of them
(`matches`), the first that fits every case that can tell (`diagnose`), and
the line that names it (`named`).
"""

from __future__ import annotations

import numpy as np

from shared.tolerances import is_close
from triptych.check.mistakes.computed import mistaken
from triptych.check.mistakes.known import BY_NAME, MISTAKES, Mistake
from triptych.check.problems import Inputs

VARIANT_NEEDS = ("n_kv_heads", "rotary", "window", "softcap", "alibi")


def applicable(adapter, names: tuple[str, ...] | None = None) -> list[Mistake]:
    """The mistakes an adapter's signature can show (all, or those `names`),
    those of a variant's option where the check was given it."""
    found = []
    variant = adapter.variant
    for mistake in MISTAKES if names is None else [BY_NAME[n] for n in names]:
        if mistake.needs in VARIANT_NEEDS and not (
            variant is not None and getattr(variant, mistake.needs)
        ):
            continue
        if mistake.needs == "projections" and adapter.level != "x":
            continue
        if mistake.needs == "heads" and not adapter.several_heads:
            continue
        narrow = adapter.several_heads or (
            adapter.level == "x" and adapter.fixed is None
        )
        if mistake.needs == "narrow" and not narrow:
            continue
        if mistake.needs == "mask" and not adapter.takes_mask:
            continue
        if mistake.needs == "batch" and adapter.max_batch < 1:
            continue
        found.append(mistake)
    return found


def matches(
    adapter, mistake: Mistake, inputs: Inputs, outcome, dtype: str, tol: str
) -> bool | None:
    """Whether `outcome` (the implementation's, on `inputs` in `dtype`) is
    attention with `mistake`, within the tolerance of `tol` (a dtype name);
    None when these inputs cannot tell (no row attends anything, or the
    mistake changes nothing here)."""
    args = (inputs, dtype, adapter.level, adapter.one_head)
    try:
        wrong = mistaken(mistake, *args)
    except ValueError:  # shapes it cannot take (x @ w.T of a narrow head): not it
        return False
    right = mistaken(None, *args)
    rows = wrong.rows
    if outcome.out.shape != wrong.out.shape:
        return False
    if not rows.any():
        return None
    if is_close(wrong.out[rows], right.out[rows], "float64") and (
        outcome.weights is None or np.array_equal(wrong.weights, right.weights)
    ):
        return None
    if not is_close(outcome.out[rows], wrong.out[rows], tol):
        return False
    if outcome.weights is None or outcome.weights.shape != wrong.weights.shape:
        return True
    query_rows = np.broadcast_to(wrong.weights.any(axis=-1), wrong.weights.shape[:-1])
    return is_close(outcome.weights[query_rows], wrong.weights[query_rows], tol)


def diagnose(adapter, cases, dtype: str, tol: str, names=None) -> Mistake | None:
    """The first mistake (of `names`, or all) the implementation makes on the
    `cases`, a list of (inputs, outcome in `dtype`), within the tolerance of
    `tol`: it matches on every case that can tell, and one can; None if none
    fits."""
    for mistake in applicable(adapter, names):
        found = [matches(adapter, mistake, i, o, dtype, tol) for i, o in cases]
        if True in found and False not in found:
            return mistake
    return None


INSIDE = (
    "(matched within float32's tolerance only: it computes in float32 inside, "
    "or adds an eps)"
)
"""Said of a mistake that float64 results show only at float32's tolerance:
torch's float32 default (ALiBi's slopes 2 ** (-8 * torch.arange(1, H + 1) /
H) are float32), or a softmax computed in float32."""


def named(adapter, cases, dtype: str, tol: str, names=None) -> str | None:
    """The line that names `diagnose`'s mistake; where none fits float64
    results held to float64's tolerance, one that fits at float32's, said so
    (INSIDE). None if none fits."""
    mistake = diagnose(adapter, cases, dtype, tol, names)
    if mistake is None and dtype == tol == "float64":
        inside = diagnose(adapter, cases, dtype, "float32", names)
        return None if inside is None else f"{inside.text} {INSIDE}"
    return None if mistake is None else mistake.text
