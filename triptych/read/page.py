"""The side-by-side page as one self-contained HTML file: no script, font or
style from anywhere else (its one inline script is the presentation mode;
the page reads whole without it), a CSS-only switch between backends on a
narrow screen, heatmaps drawn as inline SVG, and every code line a line of the
repository, linked to its file."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

from shared import registry
from triptych.read import equations, lecture_views, sources, views
from triptych.read.chapters import FUSED, Chapter
from triptych.read.lecture_text import FUSED_TEXT, LECTURE_TEXT, ROW_TITLES
from triptych.read.rows import Row
from triptych.read.style import NARROW, PRESENT, SCRIPT, STYLE
from triptych.read.text import CHAPTER_TEXT, STEP_TEXT
from triptych.read.tokens import is_docstring, marked

LECTURE = ("buildup", "frameworks", FUSED.slug)
"""The lecture's chapters, whose rows carry a title beside the function's."""


@dataclass(frozen=True)
class Column:
    """One backend's column: its name, its version line, and why it has no
    values (None when it ran)."""

    backend: str
    version: str
    missing: str | None = None


def document(
    chapters: list[tuple[Chapter, list[Row]]],
    columns: list[Column],
    values: dict,
    *,
    root: str,
    heading: str,
    roles: list[str] = (),
    context: views.Context,
    notes: dict | None = None,
    fused: list[Row] = (),
) -> str:
    """The whole page.

    Args:
        chapters: each chapter with its rows.
        columns: the backends, in order.
        values: {(backend, function): {step: [Shown]}} for the lesson chapter.
        root: where links to the repository's files point (sources.PREFIX:
            the files whole at the page's end).
        heading: the line under the title (input, dtype, versions).
        roles: what each head of the layer shown does, one line a head
            (none for random weights).
        context: the tokens and the heads' titles that label the values.
        notes: {(chapter slug, function): HTML} under that function's row:
            what the lecture's chapters measured (triptych.read.lecture),
            and under ("buildup", None) the chapter's closing exercise.
        fused: the rows of each framework's fused attention, the lesson
            chapter's last.
    """
    notes = notes or {}
    names = [c.backend for c in columns]
    parts = [
        "<!doctype html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>Attention Triptych: NumPy, PyTorch and JAX side by side</title>",
        f"<style>{STYLE}{views.STYLE}{lecture_views.STYLE}{sources.STYLE}{PRESENT}"
        f"{_switch_rules(names)}</style>",
        "</head>",
        f'<body style="--columns: {len(columns)}">',
        _switch(columns),
        "<header>",
        "<h1>Causal self-attention in NumPy, PyTorch and JAX, side by side</h1>",
        f'<p class="heading">{html.escape(heading)}</p>',
        *_roles(roles),
        '<nav><ol start="0">',
        *(
            f'<li><a href="#{c.slug}">{html.escape(c.title)}</a>'
            f"{_exercise_link(notes.get((c.slug, None)))}</li>"
            for c, _ in chapters
        ),
        "</ol></nav>",
        '<p class="fold"><label><input type="checkbox" id="fold-docs"> fold every '
        "docstring to its first line</label> (or one at a time: click its first "
        "line)</p>",
        '<p class="present-how"><button type="button" id="present">Present'
        "</button> one step a screen, for a projector: the arrow keys move, "
        "Esc leaves (or press P)</p>",
        "</header>",
        "<main>",
    ]
    for i, (chapter, rows) in enumerate(chapters):
        following = chapters[i + 1][0] if i + 1 < len(chapters) else None
        tail = notes.get((chapter.slug, None), "")
        if chapter.slug == "lesson":
            tail = _fused(fused, columns, values, root, context, notes)
        parts.append(
            _chapter(chapter, rows, columns, values, root, context, notes, tail)
        )
        parts.append(_next(i, following, root))
    linked = sources.linked("\n".join(parts))
    missing = [path for path in linked if sources.found(path) is None]
    parts = [sources.unlink_missing(part, missing) for part in parts]
    parts += [
        "</main>",
        sources.appendix(linked),
        '<p class="slide-count" aria-live="polite"></p>',
        f"<script>{SCRIPT}</script>",
        "</body>",
        "</html>",
        "",
    ]
    return "\n".join(parts)


def _exercise_link(block: str | None) -> str:
    """A link, under its chapter in the contents, to the exercise that ends it."""
    if not block:
        return ""
    anchor = re.search(r'id="([\w-]+)"', block)[1]
    title = re.search(r"<h3>(.*?)</h3>", block)[1]
    return f'<ul><li><a href="#{anchor}">{title}</a></li></ul>'


def _roles(roles: list[str]) -> list[str]:
    """What each head of the trained layer does, measured, as a list."""
    if not roles:
        return []
    return [
        '<p class="roles-title">What each head of this layer does, measured on '
        "256 held-out sequences of the training task:</p>",
        '<ul class="roles">',
        *(f"<li>{html.escape(role)}</li>" for role in roles),
        "</ul>",
    ]


def _next(number: int, following: Chapter | None, root: str) -> str:
    """The link at chapter `number`'s end to the next one (chapter 0 is the
    build-up, 1 the lesson)."""
    if following is None:
        where = (
            f'the exercises (<a href="{root}/exercises/README.md">exercises/</a>) '
            f'and <a href="{root}/docs/reading.md">docs/reading.md</a>'
        )
    else:
        where = (
            f'<a href="#{following.slug}">{number + 1}. '
            f"{html.escape(following.title)}</a>"
        )
    return f'<nav class="next" aria-label="next chapter">Next: {where}</nav>'


def _switch(columns: list[Column]) -> str:
    """Radio buttons that pick the one backend a narrow screen shows."""
    items = []
    for i, column in enumerate(columns):
        checked = " checked" if i == 0 else ""
        title = registry.get(column.backend).title
        items.append(
            f'<input type="radio" name="show" id="show-{column.backend}"{checked}>'
            f'<label for="show-{column.backend}">{title}</label>'
        )
    return f'<div class="switch" aria-label="backend to show">{"".join(items)}</div>'


def _switch_rules(names: list[str]) -> str:
    """On a narrow screen, only the checked backend's cells show."""
    rules = [
        f"body:has(#show-{name}:checked) .cell:not(.{name}):not(.shared) "
        "{ display: none; }"
        for name in names
    ]
    return f"@media {NARROW} {{" + " ".join(rules) + "}"


def _fused(rows, columns, values, root, context, notes) -> str:
    """The lesson chapter's last rows: each framework's fused attention, with
    its distance from the lesson."""
    none = "" if rows else f'<p class="none">{html.escape(FUSED.absent)}</p>'
    parts = [  # a slide of its own in the presentation mode, then its rows
        f'<div class="fused slide" id="{FUSED.slug}">',
        f"<h3>{html.escape(FUSED.title)}</h3>",
        f'<p class="text">{_inline(FUSED_TEXT, root)}</p>{none}</div>',
    ]
    parts += [_row(FUSED, row, columns, values, root, context, notes) for row in rows]
    return "\n".join(parts)


def _chapter(chapter, rows, columns, values, root, context, notes, tail="") -> str:
    intro, differences = {**CHAPTER_TEXT, **LECTURE_TEXT}[chapter.slug]
    parts = [
        f'<section class="chapter" id="{chapter.slug}">',
        '<div class="chapter-head">',
        f"<h2>{html.escape(chapter.title)}</h2>",
        *_equation(equations.CHAPTER.get(chapter.slug)),
        '<div class="intro">',
        *(f"<p>{_inline(p, root)}</p>" for p in intro.split("\n\n")),
        "</div>",
        '<ul class="differences">',
        *(_difference(d, root) for d in differences),
        f'<li>More in <a href="{root}/docs/differences.md">'
        "docs/differences.md</a>.</li>",
        "</ul>",
        '<div class="cells colheads">',
    ]
    for column in columns:
        path = f"impl_{column.backend}/{chapter.file_of(column.backend)}"
        parts.append(
            f'<div class="cell {column.backend}">'
            f"<strong>{registry.get(column.backend).title}</strong> "
            f'<a href="{root}/{path}">{path}</a><br>'
            f"<small>{html.escape(column.version)}</small></div>"
        )
    parts.append("</div></div>")  # the column heads, the chapter's head
    for row in rows:
        parts.append(_row(chapter, row, columns, values, root, context, notes))
    parts.append(tail)
    parts.append("</section>")
    return "\n".join(parts)


def _row(chapter, row: Row, columns, values, root, context, notes=None) -> str:
    function = row.key[0]
    mark = (
        "head" if row.mark is None else re.sub(r"\W+", "", row.mark.replace(" ", "_"))
    )
    # "# 7. (continued)", "# 6. (loop)", "# 6. (end)": one step, two rows
    part = re.match(r"\((\w+)\) ", row.words or "")
    mark += f"-{part[1]}" if part else ""
    anchor = f"{chapter.slug}-{function}-{mark}-{row.key[-1]}"
    step_key = f"{row.step} (continued)" if row.continued else row.step
    title = html.escape(function)
    if row.mark is None and function in ROW_TITLES and chapter.slug in LECTURE:
        title += f' <span class="step">{html.escape(ROW_TITLES[function])}</span>'
    if row.mark is not None:
        title += (
            f' <span class="step">{html.escape(row.mark)} '
            f"{html.escape(row.words)}</span>"
        )
    parts = [
        f'<div class="row" id="{anchor}" data-step="{step_key or ""}" '
        f'data-function="{html.escape(function)}">',
        f'<h3><a href="#{anchor}">{title}</a></h3>',
    ]
    parts += _equation(equations.for_row(chapter.slug, function, row.step, row.words))
    if chapter.slug == "lesson" and row.step is not None and not row.continued:
        parts.append(f'<p class="text">{_inline(STEP_TEXT[row.step], root)}</p>')
    parts.append('<div class="cells">')
    plain = registry.reference().name  # the others' tokens are compared with its
    numpy_piece = row.pieces.get(plain)
    reference = None if numpy_piece is None else [t for _, t in numpy_piece.lines]
    shared = _same_everywhere(row, columns)
    if shared:
        parts.append(_shared(row.pieces[columns[0].backend], columns, root))
    for column in [] if shared else columns:
        piece = row.pieces.get(column.backend)
        parts.append(
            f'<div class="cell {column.backend}" data-backend="{column.backend}">'
        )
        parts.append(f'<div class="label">{registry.get(column.backend).title}</div>')
        if piece is None:
            parts.append(f'<p class="none">{html.escape(chapter.absent)}</p>')
        else:
            compare = None if column.backend == plain else reference
            parts.append(_code(piece, compare, root))
        parts += _missing(chapter, row, column)
        parts.append("</div>")
    if shared:
        parts += [m for column in columns for m in _missing(chapter, row, column)]
    parts.append("</div>")
    if chapter.slug == "lesson" and row.step is not None:
        parts.append(views.computed(columns, values, function, step_key, context))
    parts.append((notes or {}).get((chapter.slug, function), ""))
    parts.append("</div>")
    return "\n".join(parts)


def _missing(chapter, row: Row, column: Column) -> list[str]:
    """Why a backend shows no values under a lesson step: not installed."""
    if chapter.slug == "lesson" and row.step is not None and column.missing:
        return [f'<p class="missing">{html.escape(column.missing)}</p>']
    return []


def _same_everywhere(row: Row, columns: list[Column]) -> bool:
    """Whether every column has this row's lines, word for word the same."""
    pieces = [row.pieces.get(c.backend) for c in columns]
    if len(pieces) < 2 or any(p is None for p in pieces):
        return False
    first = [text for _, text in pieces[0].lines]
    return all([text for _, text in p.lines] == first for p in pieces[1:])


def _shared(piece, columns: list[Column], root: str) -> str:
    """One cell across the columns for lines that are the same in every
    framework: shown once, so that what differs stands out (and a projector
    shows it at a readable size)."""
    titles = [registry.get(c.backend).title for c in columns]
    said = ", ".join(titles[:-1]) + f" and {titles[-1]}"
    paths = " ".join(
        f'<a href="{root}/impl_{c.backend}/{piece.path.split("/", 1)[1]}">'
        f"impl_{c.backend}</a>"
        for c in columns
    )
    names = " ".join(c.backend for c in columns)
    return (
        f'<div class="cell shared" data-backend="{names}">'
        f'<div class="label">{said}: the same lines <small>({paths})</small></div>'
        f"{_code(piece, None, root)}</div>"
    )


def _difference(difference, root: str) -> str:
    """One difference between the frameworks; a style choice of this code,
    which another framework could write the same way, says so."""
    text = _inline(difference.text, root)
    if difference.style:
        return f'<li class="style"><strong>Style, not framework:</strong> {text}</li>'
    return f'<li class="framework">{text}</li>'


def _equation(mathml: str | None) -> list[str]:
    """A MathML equation in its box, or nothing."""
    return [] if mathml is None else [f'<div class="equation">{mathml}</div>']


def _code(piece, reference, root) -> str:
    """The piece's lines, highlighted, numbered and linked; a docstring of more
    than one line folds under its first line (a <details>, open)."""
    lines = [text for _, text in piece.lines]
    rendered = [
        (number, _line(piece.path, number, line, root), is_docstring(line))
        for (number, _), line in zip(piece.lines, marked(lines, reference), strict=True)
    ]
    out = ['<div class="code">']
    i = 0
    while i < len(rendered):
        _, text, doc = rendered[i]
        j = i + 1
        while doc and j < len(rendered) and rendered[j][2]:
            j += 1
        if j - i > 1:  # a docstring of several lines: fold all but the first
            rest = "".join(r[1] for r in rendered[i + 1 : j])
            out.append(
                f'<details class="doc" open><summary>{text}</summary>{rest}</details>'
            )
        else:
            out.append(text)
        i = j
    out.append("</div>")
    return "".join(out)  # each line a block: no newline between them


def _line(path: str, number: int, line, root: str) -> str:
    tokens = "".join(
        f'<span class="{t.css}{" diff" if t.differs else ""}">{_text(t.text)}</span>'
        if t.css or t.differs
        else _text(t.text)
        for t in line
    )
    return (
        f'<span class="line" data-file="{path}" data-line="{number}">'
        f'<a class="ln" href="{root}/{path}:{number}" title="{path}, line {number}">'
        f'{number}</a><span class="src">{tokens}</span></span>'
    )


def _text(text: str) -> str:
    """Escaped, with every arrow kept whole: a line never breaks inside `->`."""
    return html.escape(text).replace("-&gt;", '<span class="arrow">-&gt;</span>')


def _inline(text: str, root: str) -> str:
    """Escape, then `code` spans and links to docs/ pages."""
    escaped = html.escape(text)
    parts = escaped.split("`")
    escaped = "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))
    return escaped.replace(
        "docs/contract.md", f'<a href="{root}/docs/contract.md">docs/contract.md</a>'
    ).replace(
        "docs/blockwise.md", f'<a href="{root}/docs/blockwise.md">docs/blockwise.md</a>'
    )
