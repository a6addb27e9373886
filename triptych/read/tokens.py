"""Each line's tokens, marked where the line differs from NumPy's: a line of
Python as Pygments' tokens, and the tokens a backend's line has where the
matching line of NumPy's has others.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from pygments.lexers import PythonLexer
from pygments.token import STANDARD_TYPES


@dataclass(frozen=True)
class Token:
    """A piece of a line: its text, Pygments' short class, and whether it differs
    from the matching line of NumPy's."""

    text: str
    css: str
    differs: bool = False


def tokens(line: str) -> list[Token]:
    """A line of Python as Pygments' tokens (the newline it adds dropped)."""
    return tokens_of([line])[0]


def tokens_of(lines: list[str]) -> list[list[Token]]:
    """Consecutive lines of Python as Pygments' tokens, line by line: lexed
    together, so that a docstring's later lines are a string, not code; an
    arrow `->` is one token."""
    found: list[list[Token]] = [[]]
    for kind, text in PythonLexer(stripnl=False).get_tokens("\n".join(lines)):
        while kind not in STANDARD_TYPES:
            kind = kind.parent
        css = STANDARD_TYPES[kind]
        for i, part in enumerate(text.split("\n")):
            if i:
                found.append([])
            if not part:
                continue
            line = found[-1]
            if part == ">" and line and line[-1].text == "-":
                line[-1] = Token("->", css)
            else:
                line.append(Token(part, css))
    return found[: len(lines)] + [[] for _ in range(len(lines) - len(found))]


def is_docstring(line: list[Token]) -> bool:
    """Whether a line's tokens are a docstring's, and only that."""
    text = [t for t in line if t.text.strip()]
    return bool(text) and all(t.css == "sd" for t in text)


def marked(lines: list[str], reference: list[str] | None) -> list[list[Token]]:
    """Each line's tokens, marked where it differs from `reference` (NumPy's
    lines of the same row; None: nothing to compare with, nothing marked)."""
    result = tokens_of(lines)
    if reference is None:
        return result
    theirs_tokens = tokens_of(reference)
    ours = [line.strip() for line in lines]
    theirs = [line.strip() for line in reference]
    matcher = difflib.SequenceMatcher(a=theirs, b=ours, autojunk=False)
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag == "equal":
            continue
        for offset, index in enumerate(range(b0, b1)):
            partner = a0 + offset if a0 + offset < a1 else None
            result[index] = _mark_line(
                result[index], None if partner is None else theirs_tokens[partner]
            )
    return result


def _mark_line(line: list[Token], partner: list[Token] | None) -> list[Token]:
    """Mark the tokens of `line` that `partner` (the matching line) lacks."""
    if partner is None:
        return [Token(t.text, t.css, bool(t.text.strip())) for t in line]
    matcher = difflib.SequenceMatcher(
        a=[t.text for t in partner], b=[t.text for t in line], autojunk=False
    )
    differs = [True] * len(line)
    for tag, _, _, b0, b1 in matcher.get_opcodes():
        if tag == "equal":
            differs[b0:b1] = [False] * (b1 - b0)
    return [
        Token(t.text, t.css, d and bool(t.text.strip()))
        for t, d in zip(line, differs, strict=True)
    ]
