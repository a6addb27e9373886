"""The page's chapters, read from the repository's files: each parallel file
cut into rows (a function's head, then one row per step comment), the rows of
the three backends aligned by key, and each line's tokens marked where they
differ from NumPy's.

CHAPTERS follows the reading order (triptych.common.reading.ORDER, the one
README.md and docs/reading.md give; tests/test_read.py checks that they
agree). To add a chapter: a Chapter here at its place in the order, its
words in text.CHAPTER_TEXT, and its file in ORDER and both lists.

Files are parsed (`ast`), never imported, so a backend whose framework is not
installed still shows its code.
"""

from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path

from pygments.lexers import PythonLexer
from pygments.token import STANDARD_TYPES

ROOT = Path(__file__).resolve().parents[2]
"""The repository: the page's code comes from the files under it."""

STEP = r"^\s*# (?P<mark>(?P<number>[1-7])\.) (?P<words>.*)$"
"""A step comment of the seven steps: `# 3. scores = q @ k^T`."""
SHARDED_STEP = r"^\s*# (?P<mark>(?:ring |heads )?(?P<number>[1-7])\.) (?P<words>.*)$"
"""sharded.py's comments: the seven steps' and the stages of the ring and of
the heads across devices (`# ring 2. ...`, shared.steps.RING_STAGES)."""
TRAINING_STEP = r"^\s*# (?P<mark>\[(?P<number>[1-4])\]) (?P<words>.*)$"
"""train.py's comments: `# [1] forward: ...` to `# [4] Adam: ...`."""


@dataclass(frozen=True)
class Chapter:
    """One parallel file: its slug, title, file name, and the functions (or
    classes) shown, in order.

    A chapter may also set `files`, (backend, file) for a backend that reads
    another file (NumPy has no kernel.py: its blockwise.py stands there);
    `aliases`, (name, the name whose rows it shares) for a function that
    another backend calls otherwise; `own_heads`, functions so aliased whose
    head keeps a row of its own (a wrapper and the function it runs on every
    device); `by_step`, to align the pieces by step number (and its
    "(end)"-like tag) where the comments' words differ; `steps`, the pattern
    of its step comments; and `absent`, what a cell says where a backend has
    no such lines.
    """

    slug: str
    title: str
    file: str
    names: tuple[str, ...]
    files: tuple[tuple[str, str], ...] = ()
    aliases: tuple[tuple[str, str], ...] = ()
    own_heads: tuple[str, ...] = ()
    by_step: bool = False
    steps: str = STEP
    absent: str = "No such lines here: autodiff does this."

    def file_of(self, backend: str) -> str:
        """The file this chapter reads in `backend`."""
        return dict(self.files).get(backend, self.file)

    def step_comment(self, line: str):
        """The match of a step comment of this chapter's files, or None."""
        return re.match(self.steps, line)


CHAPTERS = (
    Chapter(
        "lesson",
        "The lesson: the seven steps",
        "lesson.py",
        ("single_head_attention", "multi_head_attention"),
    ),
    Chapter(
        "attention",
        "attention.py: the library's attention",
        "attention.py",
        (
            "single_head_attention",
            "multi_head_attention",
            "multi_head",
            "attend",
            "attend_heads",
            "allowed_keys",
            "softmax_or_zeros",
            "finite_values",
            "nan_where_nonfinite_attended",
            "project",
            "at_least_float32",
        ),
    ),
    Chapter(
        "backward",
        "backward.py: by hand and by autodiff",
        "backward.py",
        (
            "single_head_attention_backward",
            "multi_head_attention_backward",
            "attend_backward",
            "project_backward",
        ),
    ),
    Chapter(
        "blockwise",
        "blockwise.py: the online softmax",
        "blockwise.py",
        ("blockwise_attention", "key_block", "online_softmax_step"),
    ),
    Chapter(
        "kv_cache",
        "kv_cache.py: decoding with a cache",
        "kv_cache.py",
        ("init_kv_cache", "decode_step"),
    ),
    Chapter(
        "variants",
        "variants.py: GQA, rotary positions, windows, caps, sinks",
        "variants.py",
        (
            "repeat_kv",
            "normed_and_rotated",
            "rms_norm",
            "rotate",
            "window_mask",
            "variant_scores",
            "make_score_mod",
            "soft_cap",
            "alibi_bias",
            "softmax_with_sinks",
            "sink_state",
            "first_key_block",
            "nonfinite_in_window",
            "cache_slot",
            "slot_positions",
        ),
    ),
    Chapter(
        "module",
        "module.py: the module forms",
        "module.py",
        ("CausalSelfAttention",),
        aliases=(("forward", "__call__"),),  # torch calls forward through __call__
    ),
    Chapter(
        "sharded",
        "sharded.py: attention across devices",
        "sharded.py",
        (
            "shard_sequence",
            "ring_attention",
            "ring_on_device",
            "ring_step",
            "attend_block",
            "pass_on",
            "head_parallel_attention",
        ),
        aliases=(("ring_on_device", "ring_attention"),),
        own_heads=("ring_on_device",),
        steps=SHARDED_STEP,
        absent="No such lines here: this framework does it otherwise (see the "
        "other columns' comments).",
    ),
    Chapter(
        "train",
        "train.py: one training step",
        "train.py",
        (
            "forward",
            "cross_entropy",
            "loss",
            "train_step",
            "gradients",
            "make_optimizer",
            "adam_step",
            "compile_train_step",
        ),
        steps=TRAINING_STEP,
        absent="No such lines here: autodiff or the optimizer's library does this.",
    ),
    Chapter(
        "train_flax",
        "train_flax.py: the training step in flax",
        "train.py",
        (
            "AttentionOnlyLM",
            "forward",
            "loss",
            "train_step",
            "make_optimizer",
            "compile_train_step",
        ),
        files=(("jax", "train_flax.py"),),
        aliases=(("__call__", "forward"),),
        steps=TRAINING_STEP,
        absent="No such lines in flax: the nnx.Module and nnx.Optimizer hold this.",
    ),
    Chapter(
        "kernel",
        "kernel.py: the online softmax as a kernel",
        "kernel.py",
        ("blockwise_attention", "flash_kernel", "online_softmax_step"),
        files=(("numpy", "blockwise.py"),),
        aliases=(("flash_kernel", "blockwise_attention"),),
        by_step=True,
        absent="No such lines in the kernel: flash_attention, around it, does this.",
    ),
)


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


# Tokens, and where a line differs from NumPy's --------------------------------


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
