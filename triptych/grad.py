"""`triptych grad`: do the backends agree on the gradients?

Every selected backend computes the gradients of L = sum(out * d_out) for one
preset, through its `single_head_attention_backward` and
`multi_head_attention_backward` (by hand in NumPy, torch.autograd, jax.vjp).
d_out is one seeded standard-normal array, the same for every backend. The
table gives, for each dtype, form and gradient, the largest absolute
difference of each backend from the float64 reference (the hand-written NumPy
backward in float64, which the test suite checks against finite differences)
and between every pair of backends, with the tolerance derived for that dtype
on this very preset (docs/suite.md: four times the largest error of 24
same-dtype references summed in other orders, never below the table of
`shared/tolerances.py`) and PASS or FAIL.

Exit status: 0 when every row passes, 1 when one fails, 2 (one line on
stderr) when a requested backend is unknown or not installed.
"""

from __future__ import annotations

import argparse
import itertools
from dataclasses import dataclass

import numpy as np

from shared import PRESETS, is_close, make_fixture, max_abs_diff, registry
from shared.dtypes import np_dtype
from shared.gradients import (
    D_OUT_SEED,
    FORMS,
    GRAD_NAMES,
    backend_gradients,
    upstream_gradient,
)
from shared.reordered import (
    references,
    reordered_multi_head_backward,
    reordered_single_head_backward,
)
from shared.tolerances import Tolerance, derived_tolerance
from triptych.common import options, prose, status
from triptych.common.backends import DTYPES, choose_backends, load_backend
from triptych.common.parser import CommaList, comma_separated
from triptych.common.tables import Table, as_rich, as_text


@dataclass(frozen=True)
class Row:
    """One line of the agreement table.

    Attributes:
        dtype, form, grad: what was compared ("float32", "multi", "w_q").
        vs_reference: backend name -> largest |diff| from the float64 reference.
        between: "a-b" -> largest |diff| between backends a and b.
        tolerance: derived for this gradient and dtype (docs/suite.md).
        passed: every comparison of the row within that tolerance.
    """

    dtype: str
    form: str
    grad: str
    vs_reference: dict[str, float]
    between: dict[str, float]
    tolerance: Tolerance
    passed: bool


def agreement_rows(backends, preset_name, dtypes=DTYPES, say=None) -> list[Row]:
    """Compare the gradients of every backend, dtype, form and gradient.

    Args:
        backends: backend name -> module, e.g. {"numpy": impl_numpy}.
        preset_name: a key of shared.PRESETS.
        dtypes: dtype names to compute in.
        say: called with the name of each step as it starts (a status line).

    Returns:
        One Row per (dtype, form, gradient): the widest dtype first (float64,
        the reference's), then by form.
    """
    import impl_numpy

    preset = PRESETS[preset_name]
    fixture = make_fixture(preset)
    d_out = upstream_gradient(preset)
    say = say or (lambda text: None)
    rows = []
    for form in FORMS:
        args = (fixture.x, fixture.params, preset.n_heads, d_out)
        say(f"{form}-head: the float64 reference")
        reference = backend_gradients(impl_numpy, form, *args, "float64")
        for dtype in dtypes:
            grads = {}
            for name, backend in backends.items():
                how = registry.get(name).gradients  # by hand, by autodiff
                say(f"{form}-head, {dtype}: {name} ({how})")
                grads[name] = backend_gradients(backend, form, *args, dtype)
            say(f"{form}-head, {dtype}: 24 reordered references, the tolerance")
            found = _references(form, args, dtype)
            for grad in GRAD_NAMES[form]:
                expected = reference[grad]
                refs = [r[grad] for r in found]
                tolerance = derived_tolerance(refs, expected, dtype)
                rows.append(_row(dtype, form, grad, grads, expected, tolerance))
    return sorted(
        rows, key=lambda r: (-np.dtype(r.dtype).itemsize, FORMS.index(r.form))
    )


def _references(form, args, dtype) -> list[dict]:
    """The gradients of shared.reordered's references in `dtype`: the
    yardstick of each row's tolerance."""
    x, params, H, d_out = args
    cast = [a.astype(np_dtype(dtype)) for a in (x, *params.values(), d_out)]
    if form == "multi":
        return references(reordered_multi_head_backward, *cast[:5], H, cast[5])
    return references(reordered_single_head_backward, *cast[:4], cast[5])


def _row(dtype, form, grad, grads, expected, tolerance) -> Row:
    """Compare one gradient of every backend with the reference and each other."""
    vs_reference, between, passed = {}, {}, True
    for name, by_grad in grads.items():
        vs_reference[name] = max_abs_diff(by_grad[grad], expected)
        passed &= is_close(by_grad[grad], expected, tolerance)
    for a, b in itertools.combinations(grads, 2):
        between[f"{a}-{b}"] = max_abs_diff(grads[a][grad], grads[b][grad])
        passed &= is_close(grads[a][grad], grads[b][grad], tolerance)
    return Row(dtype, form, grad, vs_reference, between, tolerance, passed)


IS_REFERENCE = "ref"
"""The cell of NumPy's float64 gradient against the reference, which it is:
its difference, 0 by construction, would read as an agreement measured."""


def is_reference(name: str, dtype: str) -> bool:
    """Whether `name` in `dtype` computes the reference's own gradients."""
    return name == registry.reference().name and dtype == "float64"


def agreement_table(rows: list[Row]) -> Table:
    """The rows as a `triptych.common.tables.Table`, one line per row."""
    first = rows[0]
    differences = [f"{name} vs ref" for name in first.vs_reference]
    differences += list(first.between)
    table = Table(
        title="largest |difference| of each gradient from the reference (the "
        "NumPy backward in float64) and between backends",
        columns=[
            "dtype",
            "form",
            "grad",
            *differences,
            "tolerance (atol, rtol)",
            "result",
        ],
        align="lll" + "r" * len(differences) + "ll",
        keys=3,  # dtype, form, grad name a row
        caption=(
            f"{IS_REFERENCE}: the reference itself (NumPy's float64 backward, "
            "which the test suite checks against finite differences), so no "
            "comparison; the other backends and dtypes are measured against it"
            if any(is_reference(n, r.dtype) for r in rows for n in r.vs_reference)
            else ""
        ),
    )
    for row in rows:
        atol, rtol = row.tolerance
        table.rows.append(
            [
                row.dtype,
                row.form,
                row.grad,
                *(
                    IS_REFERENCE if is_reference(name, row.dtype) else f"{d:.1e}"
                    for name, d in row.vs_reference.items()
                ),
                *(f"{d:.1e}" for d in row.between.values()),
                f"{atol:g}, {rtol:g}",
                "PASS" if row.passed else "FAIL",
            ]
        )
    return table


def run(args: argparse.Namespace) -> int:
    """The `grad` subcommand: print the table, return the exit status.

    On a terminal the table is a rich table; piped, plain text (as
    `triptych run` prints its tables).
    """
    from rich.console import Console

    preset = PRESETS[args.preset]
    shape = (*preset.batch, preset.T, preset.d_model)
    with status.shown(status.loading_text(args.backends or registry.names())):
        names, _ = choose_backends(args.backends)
        backends = {name: load_backend(name) for name in names}
    console = Console(highlight=False)
    prose.say(
        console,
        f"gradients of L = sum(out * d_out), preset {preset.name}: x {shape}, "
        f"{preset.n_heads} heads, d_out ~ N(0, 1) (seed {D_OUT_SEED + preset.seed})",
    )
    with status.shown("computing the gradients") as say:
        rows = agreement_rows(backends, args.preset, args.dtypes, say)
    failed = [row for row in rows if not row.passed]
    if failed:
        verdict = f"FAIL: {len(failed)} of {len(rows)} rows beyond the tolerance"
    else:
        verdict = f"PASS: all {len(rows)} rows within their derived tolerance"
    if console.is_terminal:
        console.print(as_rich(agreement_table(rows)))
        style = "bold red" if failed else "bold green"
        console.print(verdict, style=style, markup=False)
    else:
        print(as_text(agreement_table(rows)))
        print(verdict)
    return 1 if failed else 0


def add_parser(subparsers) -> None:
    """Add `triptych grad` to the command line."""
    parser = subparsers.add_parser(
        "grad",
        help="gradient agreement table: every backend vs a float64 reference",
        description=(
            "Compute the gradients of L = sum(out * d_out) in every backend and "
            "print the largest difference of each gradient from a float64 "
            "reference (the NumPy backward) and between backends, with PASS/FAIL "
            "at the tolerance of each dtype.\n\n"
            "exit codes: 0 all agree within the tolerance of the dtype, 1 some do "
            "not, 2 an unknown backend or one asked for but not installed (one "
            "line on stderr)"
        ),
    )
    parser.add_argument(
        "--preset",
        choices=list(PRESETS),
        default="tiny",
        help="the input's sizes (shared/config.py)",
    )
    options.backends(parser)
    parser.add_argument(
        "--dtypes",
        type=comma_separated(DTYPES, "dtype"),
        nargs="+",
        action=CommaList,
        default=DTYPES,
        metavar="NAMES",
        help=f"the dtypes to compute in, comma-separated, from {','.join(DTYPES)}",
    )
    parser.set_defaults(func=run)
