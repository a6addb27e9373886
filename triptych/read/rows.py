"""The chapters' files cut into rows: each parallel file cut into pieces (a
function's head, then one piece per step comment), and the pieces of the
backends aligned by key into the rows of the page.

Files are parsed (`ast`), never imported, so a backend whose framework is not
installed still shows its code.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from triptych.read.chapters import STEP, Chapter

ROOT = Path(__file__).resolve().parents[2]
"""The repository: the page's code comes from the files under it."""


@dataclass(frozen=True)
class Piece:
    """Consecutive lines of one file that form one row of the page.

    Attributes:
        key: what aligns it with the other backends' pieces:
            (function, "head") or (function, step comment, occurrence).
        path: the file, relative to the repository.
        lines: (line number, text without the newline).
    """

    key: tuple
    path: str
    lines: tuple[tuple[int, str], ...]


@dataclass
class Row:
    """One row of a chapter: the same piece in every backend (None where a
    backend has no such piece), and the step it shows, if any."""

    key: tuple
    step: int | None
    pieces: dict[str, Piece | None] = field(default_factory=dict)
    mark: str | None = None
    pattern: str = STEP

    @property
    def words(self) -> str:
        """The step comment's words as the file writes them (NumPy's, or the
        first backend's that has the piece), continuation lines joined: a
        row is titled by what its code does, not by the step's short name."""
        piece = next(p for p in self.pieces.values() if p is not None)
        if self.mark is None:
            return ""
        lines = [text.strip() for _, text in piece.lines]
        words = [re.match(self.pattern, lines[0])["words"]]
        for line in lines[1:]:
            if not line.startswith("#    "):
                break
            words.append(line[1:].strip())
        return " ".join(words)

    @property
    def continued(self) -> bool:
        """`# 7. (continued) ...`: the merge and projection after step 7."""
        return self.words.startswith("(continued) ")

    @property
    def title(self) -> str:
        function = self.key[0]
        if self.mark is None:
            return f"{function}"
        return f"{function}: {self.mark} {self.words}"


def pieces_of(backend: str, chapter: Chapter) -> list[Piece]:
    """The pieces of `chapter`'s file in `backend`, in file order."""
    path = f"impl_{backend}/{chapter.file_of(backend)}"
    source = (ROOT / path).read_text().splitlines()
    found = []
    for node in _definitions(ast.parse("\n".join(source)), chapter.names):
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        found += _cut(node, path, source, first, node.end_lineno, chapter)
    return found


def _definitions(tree: ast.Module, names: tuple[str, ...]):
    """The top-level functions and classes named, and a class's methods."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            yield node
        elif isinstance(node, ast.ClassDef) and node.name in names:
            yield from (n for n in node.body if isinstance(n, ast.FunctionDef))


def _cut(
    node, path: str, source: list[str], first: int, last: int, chapter: Chapter
) -> list[Piece]:
    """A function's lines cut at its step comments: the head, then one piece a
    step comment (its lines up to the next one)."""
    name = dict(chapter.aliases).get(node.name, node.name)
    head = (name, "head", node.name) if node.name in chapter.own_heads else None
    pieces, key, lines, seen = [], head or (name, "head"), [], {}
    for number in range(first, last + 1):
        text = source[number - 1]
        if match := chapter.step_comment(text):
            if lines:
                pieces.append(Piece(key, path, tuple(lines)))
            comment = f"# {match['mark']} {match['words']}"
            if chapter.by_step:  # "# 6. (end)" of "# 6. (end) normalize: ..."
                tag = re.match(r"\(\w+\)", match["words"])
                comment = f"# {match['mark']}" + (f" {tag[0]}" if tag else "")
            seen[comment] = seen.get(comment, 0) + 1
            key, lines = (name, comment, seen[comment]), []
        lines.append((number, text))
    pieces.append(Piece(key, path, tuple(lines)))
    return pieces


def rows_of(chapter: Chapter, backends: list[str]) -> list[Row]:
    """The chapter's rows, aligned by key, in NumPy's order (a key NumPy lacks
    comes after the key before it in the backend that has it)."""
    order: list[tuple] = []
    found = {name: {p.key: p for p in pieces_of(name, chapter)} for name in backends}
    for name in backends:
        previous = None
        for key in found[name]:
            if key not in order:
                at = order.index(previous) + 1 if previous in order else len(order)
                order.insert(at, key)
            previous = key
    rows = []
    for key in order:
        pieces = {name: found[name].get(key) for name in backends}
        first = next(p for p in pieces.values() if p is not None).lines[0][1]
        match = None if key[1] == "head" else chapter.step_comment(first)
        mark = None if match is None else match["mark"]
        plain = mark is not None and mark[0].isdigit()  # a step of the seven
        step = int(match["number"]) if plain else None
        rows.append(Row(key, step, pieces, mark, chapter.steps))
    return rows
