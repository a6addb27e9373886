"""The files the page links to, whole, at its end: every link to a file (a
code line's number, a column's file, a doc) is a link inside the page, so
that it works wherever the page is copied (a course site, a USB stick),
with no repository beside it."""

from __future__ import annotations

import html
import re
from pathlib import Path

from triptych.read.rows import ROOT

PREFIX = "#src"
"""Where the page's links to files point: `#src/impl_numpy/lesson.py`, and
`#src/impl_numpy/lesson.py:25` for a line."""


def linked(page: str) -> list[str]:
    """The repository's files the page links to, in order of first link."""
    paths = re.findall(r'href="#src/([^":]+)(?::\d+)?"', page)
    return list(dict.fromkeys(paths))


def found(path: str) -> Path | None:
    """Where a linked file is: beside the installed packages (a clone, an
    editable install), else in the folder the command runs in, when that is
    a clone of the repository (tox installs the packages alone, and runs in
    the clone); None where neither holds it."""
    for root in (ROOT, Path.cwd()):
        if (root / path).is_file() and (root / "impl_numpy" / "lesson.py").is_file():
            return root / path
    return None


def unlink_missing(page: str, missing: list[str]) -> str:
    """The page with each link to a file it cannot carry turned into the file's
    name: a link that led nowhere would be worse than none."""
    for path in missing:
        pattern = rf'<a href="#src/{re.escape(path)}(?::\d+)?"[^>]*>(.*?)</a>'
        page = re.sub(pattern, r"\1", page, flags=re.S)
    return page


def appendix(paths: list[str]) -> str:
    """Every linked file whole, each line with its anchor (those `found`)."""
    parts = [
        '<section class="sources" id="sources">',
        "<h2>The files, whole</h2>",
        "<p>Every file this page links to, as it was when the page was built, "
        "so that the links work wherever the page is copied.</p>",
    ]
    for path in paths:
        if (source := found(path)) is None:
            continue
        lines = source.read_text(encoding="utf-8").splitlines()
        body = "".join(
            f'<span class="source-line" id="src/{path}:{n}">'
            f'<span class="source-n">{n}</span>{html.escape(line)}\n</span>'
            for n, line in enumerate(lines, start=1)
        )
        parts.append(
            f'<div class="source" id="src/{path}"><h3>{html.escape(path)}</h3>'
            f"<pre>{body}</pre></div>"
        )
    parts.append("</section>")
    return "\n".join(parts)


STYLE = """
.sources pre { font: 13px/1.45 ui-monospace, Menlo, "DejaVu Sans Mono", monospace;
  background: #f6f8fa; padding: 6px 8px; white-space: pre-wrap;
  overflow-wrap: anywhere; }
.source-line:target { background: var(--mark); }
.source-n { display: inline-block; width: 3.2em; color: #9aa0a6;
  user-select: none; }
@media print { .sources { display: none; } }
body.present .sources { display: none; }
"""
"""The appendix's CSS."""
