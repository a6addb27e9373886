"""What a lesson step computed, as the page shows it under the step's code:
once for the row (the first backend's values; every backend's distance from
the float64 oracle beside them), every head drawn as a heatmap labelled with
the tokens, with its colour scale, the mask drawn as a mask, and every value
behind a <details>, so that a room can read it projected."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

import numpy as np

from shared import registry
from triptych.read.values import Shown

LIGHT, DARK = (247, 251, 255), (8, 48, 107)
"""The weights' colours at 0 and at 1 (a sequential blue)."""
ATTEND = "#2b6cb0"
"""The mask's colour where a query may attend (masked: HIDDEN, as everywhere)."""


@dataclass(frozen=True)
class Context:
    """What labels the views: the tokens, each head's title (with what it
    does, for the trained model) and the one-head lesson's."""

    labels: list[str]
    heads: list[str]
    one_head: str


def colour(value: float) -> str:
    """A weight in [0, 1] as a colour, light to dark; the square root lifts
    the small weights into sight."""
    f = math.sqrt(min(max(value, 0.0), 1.0))
    r, g, b = (round(lo + (hi - lo) * f) for lo, hi in zip(LIGHT, DARK, strict=True))
    return f"rgb({r},{g},{b})"


def computed(columns, values: dict, function: str, step, context: Context) -> str:
    """The block under a lesson row: each array its step made, once."""
    ran = [c for c in columns if c.missing is None]
    if not ran:
        return ""
    found = {
        c.backend: (values.get((c.backend, function)) or {}).get(step, []) for c in ran
    }
    first = ran[0].backend
    if not found[first]:
        return '<p class="none computed">Nothing to compute with one head.</p>'
    title = registry.get(first).title
    parts = [
        '<div class="computed">',
        f'<p class="computed-title">What this step computed: {title}\'s '
        "values, each backend's largest distance from the float64 oracle beside "
        "them</p>",
    ]
    for index, shown in enumerate(found[first]):
        each = [(b, found[b][index]) for b in found if index < len(found[b])]
        parts.append(array(shown, each, function, context))
    parts.append("</div>")
    return "\n".join(parts)


def array(shown: Shown, each: list[tuple[str, Shown]], function, context) -> str:
    """One array: its name, shape and agreement, its heatmaps, its values."""
    shape = ", ".join(map(str, shown.shape))
    parts = [
        f'<div class="array" data-name="{shown.name}" data-shape="{shape}">',
        f'<div class="array-head"><code>{shown.name}</code> '
        f'<span class="shape">({shape})</span> {agreement(each)}</div>',
    ]
    if shown.drawn:
        parts.append(drawn(shown, function, context))
    parts.append(every_value(shown, context))
    parts.append("</div>")
    return "\n".join(parts)


def agreement(each: list[tuple[str, Shown]]) -> str:
    """'NumPy 2.1e-07, PyTorch 3.0e-07, JAX 0 from the oracle: within'."""
    spans = []
    for backend, s in each:
        status = "ok" if s.within else "bad"
        if s.error is None:
            text = "equal" if s.within else "differs"
        else:
            text = "0" if s.error == 0 else f"{s.error:.1e}"
        title = registry.get(backend).title
        spans.append(
            f'<span class="agree {status}" data-backend="{backend}" '
            f'data-error="{"" if s.error is None else repr(s.error)}" '
            f'data-within="{str(s.within).lower()}">{title} {text}</span>'
        )
    verdict = (
        "within the tolerance"
        if all(s.within for _, s in each)
        else "BEYOND the tolerance"
    )
    return (
        f'<span class="agreement">{", ".join(spans)} from the float64 oracle: '
        f"{verdict}</span>"
    )


def drawn(shown: Shown, function: str, context: Context) -> str:
    """Every head's matrix as a labelled heatmap, and the colour scale: the
    mask in two colours, the scores on a scale from minus to plus their
    largest size, the weights from 0 to 1; a masked cell hatched grey in
    every one, so that it never reads as a small allowed weight."""
    value = shown.value
    if shown.mask:
        matrices = [
            value if value.ndim == 2 else value.reshape(-1, *value.shape[-2:])[0]
        ]
        titles = ["the causal mask (one for every head)"]
    elif value.ndim == 2:
        matrices, titles = [value], [context.one_head]
    else:
        matrices = list(value.reshape(-1, *value.shape[-2:]))
        titles = context.heads[: len(matrices)]
    span = None
    if not shown.mask and shown.name != "weights":
        finite = value[np.isfinite(value)]
        span = float(np.max(np.abs(finite))) if finite.size else 1.0
    scale = (
        mask_scale()
        if shown.mask
        else weight_scale()
        if span is None
        else score_scale(span, bool(np.isneginf(value).any()))
    )
    maps = "".join(
        f'<figure class="map">{heatmap(m, context.labels, t, shown.name, h, span)}'
        f"<figcaption>{html.escape(t)}</figcaption></figure>"
        for h, (m, t) in enumerate(zip(matrices, titles, strict=True))
    )
    return f'<div class="maps">{maps}</div>{scale}'


FONT, CELL = 16, 28
"""A label's size and a cell's side, in the drawing's units: one unit is one
pixel or more wherever the page is at least 1024 px wide (the labels' size
at a projector's 1024x768), and the drawing grows with the window."""


def label(index: int, word: str) -> str:
    """A token's label: its index, since every word of the sentence occurs
    twice and which "cat" is attended is the point."""
    return f"{index} {word}"


def masked_cells(matrix: np.ndarray, name: str) -> np.ndarray:
    """Where the causal mask removed the key: -inf scores, and the weights
    above the diagonal (exactly 0 there)."""
    if name == "weights":
        return np.triu(np.ones(matrix.shape, dtype=bool), 1)
    return np.isneginf(matrix)


def heatmap(
    matrix: np.ndarray,
    labels: list[str],
    title: str,
    name: str,
    head: int = 0,
    span: float | None = None,
) -> str:
    """A (T, T) matrix as an SVG heatmap that grows with the window, rows the
    queries and columns the keys, each labelled with its index and token; a
    mask in two colours, weights from light (0) to dark (1), scores (`span`:
    their largest size) from orange (-span) through white to blue (+span),
    masked cells hatched grey. Hovering a cell shows its value."""
    rows, columns = matrix.shape
    cell, char = CELL, FONT * 0.62  # a monospace character's width
    longest = max(len(label(i, w)) for i, w in enumerate(labels[: max(rows, columns)]))
    rise = math.sin(math.radians(60))  # the keys' labels rise at 60 degrees
    left = round(10 + char * longest)
    top = round(12 + char * longest * rise)
    width = round(left + columns * cell + char * longest * 0.5 + 8)
    height = top + rows * cell + 2
    said = html.escape(f"{name}, {title}: rows the queries, columns the keys")
    size = f"min(100%, {round(width * 1.3)}px, {width / height * 84:.1f}vh)"
    parts = [
        f'<svg class="heatmap" role="img" data-name="{name}" data-head="{head}" '
        f'aria-label="{said}" viewBox="0 0 {width} {height}" '
        f'style="width: {size}" font-size="{FONT}">'
    ]
    for i in range(rows):
        y = top + i * cell + cell * 0.7
        parts.append(
            f'<text class="query" x="{left - 5}" y="{y:.1f}" text-anchor="end">'
            f"{html.escape(label(i, labels[i]))}</text>"
        )
    for j in range(columns):
        x, y = left + j * cell + cell * 0.65, top - 5
        parts.append(
            f'<text class="key" x="{x:.1f}" y="{y}" '
            f'transform="rotate(-60 {x:.1f} {y})">'
            f"{html.escape(label(j, labels[j]))}</text>"
        )
    hidden = ~matrix if matrix.dtype == bool else masked_cells(matrix, name)
    for i in range(rows):
        for j in range(columns):
            v = matrix[i, j]
            if matrix.dtype == bool:
                fill, text = (ATTEND, "may attend") if v else (HIDDEN, "masked")
            elif hidden[i, j]:
                fill, text = HIDDEN, f"masked ({number_text(v)})"
            else:
                number = float(np.nan_to_num(v))
                fill = colour(number) if span is None else diverging(number, span)
                text = f"{number:.3f}"
            parts.append(
                f'<rect x="{left + j * cell}" y="{top + i * cell}" width="{cell}" '
                f'height="{cell}" fill="{fill}"><title>query '
                f"{html.escape(label(i, labels[i]))}, key "
                f"{html.escape(label(j, labels[j]))}: {text}</title></rect>"
            )
    hatch = "".join(
        f"M{left + j * cell + 3} {top + (i + 1) * cell - 3}l{cell - 6} {6 - cell}"
        for i, j in zip(*np.nonzero(hidden), strict=True)
    )
    if hatch:
        parts.append(f'<path class="hatch" d="{hatch}" stroke="{HATCH}"/>')
    parts.append("</svg>")
    return "".join(parts)


def number_text(value) -> str:
    """A masked cell's value in its hover text: -inf, or 0."""
    return "-inf" if np.isneginf(value) else f"{float(value):g}"


NEGATIVE = (179, 88, 6)
"""The scores' colour at minus their largest size (an orange); plus is DARK."""
HIDDEN, HATCH = "#d5d8dd", "#8a9099"
"""A masked cell of the scores or weights: grey, struck through."""


def diverging(value: float, span: float) -> str:
    """A score in [-span, span] as a colour: orange below 0, white at 0, blue
    above, the square root lifting the small ones as `colour` does."""
    f = math.sqrt(min(abs(value) / span, 1.0)) if span else 0.0
    end = DARK if value >= 0 else NEGATIVE
    white = (255, 255, 255)
    r, g, b = (round(lo + (hi - lo) * f) for lo, hi in zip(white, end, strict=True))
    return f"rgb({r},{g},{b})"


def masked_swatch() -> str:
    return (
        f'<span class="swatch" style="background: {HIDDEN}; background-image: '
        f"linear-gradient(135deg, transparent 45%, {HATCH} 45%, {HATCH} 55%, "
        'transparent 55%)"></span> masked (the future: -inf, weight exactly 0)'
    )


def weight_scale() -> str:
    """The weights' colour scale, 0 to 1, with its ticks, and the masked cell."""
    stops = ", ".join(f"{colour(k / 10)} {k * 10}%" for k in range(11))
    ticks = "".join(f"<span>{k / 4:g}</span>" for k in range(5))
    return (
        '<div class="scale" role="img" aria-label="colour scale: weight 0 light, '
        '1 dark; masked cells grey, struck through">'
        f'<div class="bar" style="background: linear-gradient(to right, {stops})">'
        f'</div><div class="ticks">{ticks}</div>'
        '<div class="scale-note">weight (each row sums to 1) '
        f"{masked_swatch()}</div></div>"
    )


def score_scale(span: float, masked: bool) -> str:
    """The scores' colour scale, -span to +span, with its ticks."""
    stops = ", ".join(
        f"{diverging(span * (k - 10) / 10, span)} {k * 5}%" for k in range(21)
    )
    ticks = "".join(f"<span>{span * (k - 2) / 2:+.1f}</span>" for k in range(5))
    note = masked_swatch() if masked else ""
    return (
        f'<div class="scale" role="img" data-span="{span!r}" aria-label="colour '
        f'scale: score -{span:.1f} orange, 0 white, +{span:.1f} blue">'
        f'<div class="bar" style="background: linear-gradient(to right, {stops})">'
        f'</div><div class="ticks">{ticks}</div>'
        f'<div class="scale-note">score (before the softmax) {note}</div></div>'
    )


def mask_scale() -> str:
    """The mask's two colours, named."""
    return (
        '<div class="scale mask-legend">'
        f'<span class="swatch" style="background: {ATTEND}"></span> may attend '
        f"(True: key j &le; query i) "
        f"{masked_swatch()}</div>"
    )


def every_value(shown: Shown, context: Context) -> str:
    """Every value, behind a <details>: one table per (T, columns) matrix."""
    value = shown.value
    matrices = value.reshape(-1, *value.shape[-2:]) if value.ndim > 2 else [value]
    tables = []
    for h, matrix in enumerate(matrices):
        caption = context.heads[h] if len(matrices) > 1 else ""
        tables.append(table(matrix, context.labels, caption))
    count = "every value" if not shown.mask else "the mask, entry by entry"
    return (
        f'<details class="values"><summary>{count} of <code>{shown.name}</code> '
        f"({', '.join(map(str, shown.shape))})</summary>{''.join(tables)}</details>"
    )


def table(matrix: np.ndarray, labels: list[str], caption: str) -> str:
    """Rows labelled with the tokens; columns with the tokens when square
    (keys), else with their index (the D dimensions)."""
    rows, columns = matrix.shape
    square = rows == columns == len(labels)
    head = "".join(
        f"<th>{html.escape(label(j, labels[j])) if square else j}</th>"
        for j in range(columns)
    )
    body = "".join(
        f"<tr><th>{i} {html.escape(labels[i])}</th>"
        + "".join(f"<td>{number(v)}</td>" for v in matrix[i])
        + "</tr>"
        for i in range(rows)
    )
    title = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return f'<table class="every">{title}<tr><th></th>{head}</tr>{body}</table>'


def number(value) -> str:
    """A value as the tables print it: 3 places, 0 for an exact zero, the
    infinities as signs, a mask's entries as marks."""
    if isinstance(value, np.bool_ | bool):
        return "&#x2713;" if value else "&#xB7;"
    value = float(value)
    if math.isinf(value):
        return "&#x2212;&#x221E;" if value < 0 else "&#x221E;"
    if math.isnan(value):
        return "NaN"
    return "0" if value == 0 else f"{value:.3f}"


STYLE = """
.computed { margin: 10px 0 4px; padding: 8px 10px; background: #fbfcfe;
  border: 1px solid var(--line); border-radius: 4px; }
.computed-title { margin: 0 0 6px; color: var(--muted); font-size: 13px; }
.array { margin: 6px 0 10px; }
.array-head { font-size: 14px; }
.agreement { color: var(--muted); font-size: 13px; }
.maps { display: grid; gap: 12px 20px; margin: 6px 0 2px;
  grid-template-columns: repeat(auto-fill, minmax(min(100%, 560px), 1fr)); }
figure.map { margin: 0; min-width: 0; }
figure.map figcaption { font-size: 15px; color: var(--muted); }
svg.heatmap { display: block; height: auto; font-family: ui-monospace, Menlo,
  "DejaVu Sans Mono", monospace; }
svg.heatmap text { fill: var(--ink); }
svg.heatmap .hatch { stroke-width: 1.5; }
.scale { font-size: 14px; color: var(--muted); margin: 2px 0 4px;
  width: min(100%, 420px); }
.scale .bar { height: 14px; border: 1px solid var(--line); }
.scale .ticks { display: flex; justify-content: space-between; }
.mask-legend, .scale-note { width: auto; }
.swatch { display: inline-block; width: 12px; height: 12px; vertical-align: middle;
  border: 1px solid var(--line); margin-left: 8px; }
details.values { max-width: 100%; overflow-x: auto; }
details.values summary { cursor: pointer; font-size: 13px; }
table.every { border-collapse: collapse; margin: 4px 12px 8px 0; display: inline-table;
  font: 11px ui-monospace, Menlo, monospace; }
table.every caption { text-align: left; color: var(--muted); }
table.every td, table.every th { padding: 0 4px; text-align: right;
  border: 1px solid var(--line); }
table.every th { background: #f6f8fa; font-weight: normal; }
"""
"""The views' CSS, added to the page's."""
