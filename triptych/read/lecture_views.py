"""How the page shows what the lecture's chapters measured (triptych.read.
lecture): under each stage or extras function, a table with a column per
framework, its distance from what the row is read against and from the
float64 oracle; a program where a framework prints one (JAX's jaxpr); the
scale's variance at initialisation; and "predict the stripe", its answer
folded until the reader opens it."""

from __future__ import annotations

import html

import numpy as np

from shared import registry
from triptych.common.backends import load_backend
from triptych.read import lecture
from triptych.read.lecture import SAME, Measured, Stripe
from triptych.read.lecture_text import BEFORE, PREDICT_TEXT, STAGE_GIVES


def measured_table(function: str, what: str, found: dict[str, Measured]) -> str:
    """The distances of one row's function, a column per framework that has
    it; a framework's program in a fold where it printed one."""
    names = list(found)
    head = "".join(f"<th>{registry.get(n).title}</th>" for n in names)
    rows = []
    if function in BEFORE and any(m.before is not None for m in found.values()):
        no = "NOT the same" if function in SAME else "a new idea"
        cells = "".join(_cell(m.before, m.same, "the same", no) for m in found.values())
        rows.append(f"<tr><th>from {html.escape(BEFORE[function])}</th>{cells}</tr>")
    if any(m.text is None for m in found.values()):
        cells = "".join(
            _cell(m.error, m.within, "within the tolerance", "BEYOND the tolerance")
            for m in found.values()
        )
        rows.append(f"<tr><th>from the float64 oracle</th>{cells}</tr>")
    programs = [
        f'<details class="program"><summary>{registry.get(m.backend).title}: '
        f"the program it traced, {m.text.count(chr(10)) + 1} lines (click)</summary>"
        f"<pre>{html.escape(m.text)}</pre></details>"
        for m in found.values()
        if m.text is not None
    ]
    table = (
        f'<table class="measured" data-function="{function}">'
        f"<caption>{html.escape(what)}, measured when the page was built"
        f"</caption><tr><th></th>{head}</tr>{''.join(rows)}</table>"
        if rows
        else ""
    )
    return f'<div class="lecture-measured">{table}{"".join(programs)}</div>'


def _cell(value: float | None, good: bool | None, yes: str, no: str) -> str:
    if value is None:
        return "<td></td>"
    text = "0" if value == 0 else f"{value:.1e}"
    status = "ok" if good else "changed" if no == "a new idea" else "bad"
    return (
        f'<td class="agree {status}" data-distance="{value!r}">{text} '
        f"<small>({yes if good else no})</small></td>"
    )


def scale_note(D: int, scores: np.ndarray) -> str:
    """What the scale is for, measured: the variance of D products of
    independent unit-variance entries, before and after dividing by sqrt(D),
    against this trained head's scaled scores."""
    q, k = np.random.default_rng(0).standard_normal((2, 20_000, D))
    dots = (q * k).sum(axis=-1)
    top = np.abs(scores[np.isfinite(scores)]).max()
    return (
        '<p class="scale-note">At initialisation, with independent unit-variance '
        f"entries, q[i] . k[j] over D = {D} has variance {dots.var():.1f} "
        f"(20,000 draws), and {(dots / np.sqrt(D)).var():.2f} once divided by "
        f"sqrt(D): unit size, where the softmax is not saturated. This trained "
        f"head's scaled scores reach &plusmn;{top:.0f}: the scale is for the "
        "start of training, not a bound.</p>"
    )


def predict(tokens: list[str], stripes: list[Stripe], head: int) -> str:
    """The exercise and its answer, folded; nothing where no token repeats."""
    if not stripes:
        return ""
    words = " ".join(tokens)
    text = PREDICT_TEXT.format(sentence=words, first=stripes[0].row, head=head)
    rows = "".join(
        f'<tr data-row="{s.row}" data-expected="{s.expected}" '
        f'data-attended="{s.attended}"><td>{s.row} {html.escape(tokens[s.row])}</td>'
        f"<td>{s.expected} {html.escape(tokens[s.expected])}</td>"
        f"<td>{s.attended} {html.escape(tokens[s.attended])}</td>"
        f"<td>{s.weight:.2f}</td></tr>"
        for s in stripes
    )
    hits = sum(s.attended == s.expected for s in stripes)
    parts = [
        '<div class="predict slide" id="predict-the-stripe">',
        "<h3>Exercise: predict the stripe</h3>",
        f"<p>{_code(html.escape(text))}</p>",
        '<details class="answer"><summary>Show the answer</summary>',
        "<table><tr><th>row</th><th>expected: the column after the token's "
        "last occurrence</th><th>attended most</th><th>weight on the "
        f"expected</th></tr>{rows}</table>",
        f"<p>{hits} of {len(stripes)} rows attend the expected column most "
        "(the float64 oracle's weights of this head).</p>",
        "</details>",
        "</div>",
    ]
    return "\n".join(parts)


def _code(escaped: str) -> str:
    """`code` spans in already escaped text."""
    parts = escaped.split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def notes(view, loaded: dict, dtype: str) -> tuple[dict, bool]:
    """{(chapter slug, function): HTML} of every measured row, the exercise
    under ("buildup", None), and whether every value is within the
    tolerance of its oracle.

    Args:
        view: the page's model and sentence (triptych.common.trained.view).
        loaded: {backend name: its module}, the backends that loaded.
    """
    expected = lecture.oracles(
        view, lambda name: loaded.get(name) or load_backend(name)
    )
    stages: dict[str, dict] = {stage: {} for stage in lecture.STAGES}
    adds: dict[str, dict] = {function: {} for function in lecture.DEMOS}
    for name, backend in loaded.items():
        given = lecture.inputs(backend, view, dtype)
        for stage, found in lecture.buildup(
            name, backend, given, expected, dtype
        ).items():
            stages[stage][name] = found
        for function, found in lecture.extras(
            name, backend, given, expected, dtype
        ).items():
            adds[function][name] = found
    shown = {}
    for stage, found in stages.items():
        what = STAGE_GIVES.get(stage, "what each token receives (T, D)")
        shown[("buildup", stage)] = measured_table(stage, what, found)
    D = view.single_weights()[0].shape[1]
    shown[("buildup", "scaled")] += scale_note(D, expected["masked"])
    for function, found in adds.items():
        if found:
            slug = "fused" if lecture.DEMOS[function].beside_lesson else "frameworks"
            table = measured_table(function, lecture.DEMOS[function].what, found)
            shown[(slug, function)] = table
    if view.trained:
        tokens = list(view.fixture.preset.tokens)
        answer = lecture.stripe(tokens, expected["weights"])
        shown[("buildup", None)] = predict(tokens, answer, view.head)
    ours = {f: by for f, by in adds.items() if lecture.DEMOS[f].ours}
    agrees = all(
        m.within and (m.same or function not in lecture.SAME)
        for function, by in {**stages, **ours}.items()
        for m in by.values()
        if m.text is None
    )
    return shown, agrees


STYLE = """
table.measured { border-collapse: collapse; margin: 6px 0; font-size: 14px; }
table.measured caption { text-align: left; color: #555; }
table.measured th, table.measured td { border: 1px solid #d0d7de;
  padding: 2px 8px; text-align: left; }
table.measured td.ok { background: #eef8ee; }
table.measured td.bad { background: #fde8e8; }
table.measured td.changed { background: #fff7e0; }
details.program pre { font: 12px/1.4 ui-monospace, Menlo, "DejaVu Sans Mono",
  monospace; background: #f6f8fa; padding: 6px 8px; white-space: pre-wrap; }
.predict { border: 2px solid #2b6cb0; padding: 6px 12px; margin: 12px 0; }
.predict table { border-collapse: collapse; }
.predict td, .predict th { border: 1px solid #d0d7de; padding: 2px 8px; }
.fused { margin-top: 18px; }
"""
"""The lecture blocks' CSS."""
