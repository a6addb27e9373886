"""The reading path: the lesson files are the library bit for bit, they and
attention.py walk the seven steps of the contract in order, comments stay
short, no private name crosses a file, and nothing in the repository names a
file that is not in it. That every backend's copy carries the same step
comments in the same order is tools/check_parallel.py's to check
(tests/test_parallel.py)."""

from __future__ import annotations

import ast
import importlib
import io
import re
import tokenize
from pathlib import Path

import numpy as np
import pytest
from helpers import name_of

from shared import PRESETS, make_fixture
from shared.steps import (
    CACHE_STAGES,
    CONTINUED,
    HEADS_STAGES,
    RING_STAGES,
    step_comment,
    steps_of,
)

ROOT = Path(__file__).resolve().parents[1]
IMPLS = ("impl_numpy", "impl_torch", "impl_jax")
STEP_COMMENT = re.compile(r"^\s*# [1-7]\. .*$", re.M)
MAX_COMMENT_RATIO = 0.8


@pytest.mark.parametrize("preset", list(PRESETS))
def test_the_lesson_is_the_library_bit_for_bit(backend, dtype, preset):
    lesson = importlib.import_module(f"{backend.__name__}.lesson")
    fixture = make_fixture(PRESETS[preset]).astype(dtype)
    x, w_q, w_k, w_v, w_o = (
        backend.from_numpy(a) for a in (fixture.x, *fixture.params.values())
    )
    H = fixture.preset.n_heads
    for name, args in (
        ("single_head_attention", (x, w_q, w_k, w_v)),
        ("multi_head_attention", (x, w_q, w_k, w_v, w_o, H)),
    ):
        taught = getattr(lesson, name)(*args)
        library = getattr(backend, name)(*args)
        for a, b, what in zip(taught, library, ("out", "weights"), strict=True):
            np.testing.assert_array_equal(
                backend.to_numpy(a), backend.to_numpy(b), err_msg=f"{name} {what}"
            )


def test_the_lessons_walk_the_seven_steps_in_order(backend):
    lesson = importlib.import_module(f"{backend.__name__}.lesson")
    for function in (lesson.single_head_attention, lesson.multi_head_attention):
        steps = steps_of(function)
        numbers = [(s.number, s.continued) for s in steps]
        seven = [(n, False) for n in range(1, 8)]
        if function.__name__ == "multi_head_attention":  # then merge, project
            assert numbers == [*seven, (7, True)], function.__name__
        else:
            assert numbers == seven, function.__name__
        numbered = [s for s in steps if s.lines]
        assert all(len(s.lines) <= 3 for s in numbered), "a step in a few lines"
    text = (ROOT / name_of_file(backend, "lesson.py")).read_text()
    comments = [line.strip() for line in STEP_COMMENT.findall(text)]
    seven = [step_comment(n) for n in range(1, 8)]
    assert comments == [*seven, *seven, f"# 7. (continued) {CONTINUED}"]


@pytest.mark.reads_source
def test_attention_py_reads_top_down_as_the_seven_steps(backend):
    attention = importlib.import_module(f"{backend.__name__}.attention")
    head = steps_of(attention.multi_head_attention)
    assert [(s.number, s.continued) for s in head] == [(5, False)]
    assert head[0].words.startswith("(ahead) ")  # built here, applied in attend
    shell = steps_of(attention.multi_head)  # the same around every core
    assert [(s.number, s.continued) for s in shell] == [
        (1, False),
        (2, False),
        (7, True),
    ]
    core = steps_of(attention.attend)
    assert [s.number for s in core] == [3, 4, 5, 6, 7]
    assert "out = weights @ finite_values(v)" in core[-1].lines[0][1]
    # the steps come first: the public functions open the file, the policy after
    text = (ROOT / name_of_file(backend, "attention.py")).read_text()
    order = [m[1] for m in re.finditer(r"^def (\w+)", text, re.M)]
    assert order[:4] == [
        "single_head_attention",
        "multi_head_attention",
        "attend",
        "attention_entropy",
    ]
    policy = text.index("# Policy:")
    for helper in ("causal_mask", "softmax_or_zeros", "finite_values"):
        assert text.index(f"def {helper}(") > policy


@pytest.mark.reads_source
@pytest.mark.neutral  # the source only: once, in the jax env
def test_kv_cache_py_names_the_cache_stages_alike_everywhere():
    """`# cache 1. ...` and `# cache 2. ...`: the words of shared/steps.py,
    then the framework's own (in place, or a new array)."""
    stage = re.compile(r"^\s*# cache (\d)\. (.*)$", re.M)
    for impl in IMPLS:
        found = stage.findall(read(impl, "kv_cache.py"))
        assert [int(n) for n, _ in found] == [1, 2], impl
        for number, words in found:
            assert words.startswith(CACHE_STAGES[int(number) - 1]), impl


@pytest.mark.reads_source
@pytest.mark.neutral  # the source only: once, in the jax env
def test_sharded_py_names_the_stages_of_both_strategies_alike_everywhere():
    """`# ring 1. ...` and `# heads 1. ...`: the words of shared/steps.py, in
    the same order in every backend."""
    stage = re.compile(r"^\s*# (ring|heads) (\d)\. (.*)$", re.M)
    found = {impl: stage.findall(read(impl, "sharded.py")) for impl in IMPLS}
    assert found["impl_torch"] == found["impl_numpy"] == found["impl_jax"]
    titles = {"ring": RING_STAGES, "heads": HEADS_STAGES}
    for kind, number, words in found["impl_numpy"]:
        assert words == titles[kind][int(number) - 1]
    assert {(k, int(n)) for k, n, _ in found["impl_numpy"]} == {
        (kind, n + 1) for kind, stages in titles.items() for n in range(len(stages))
    }


@pytest.mark.reads_source
@pytest.mark.neutral  # the source only: once, in the jax env
def test_the_kernels_online_softmax_step_walks_blockwises_steps():
    """The kernels' online softmax step (impl_torch/kernel.py and
    impl_jax/kernel.py, the same comments: tools/check_parallel.py) walks the
    steps of blockwise.py's (NumPy has no kernel.py)."""
    blockwise = read("impl_numpy", "blockwise.py")
    step = blockwise[blockwise.index("def online_softmax_step") :]
    kernel = read("impl_jax", "kernel.py")
    kernel_step = kernel[kernel.index("def online_softmax_step") :]
    numbers = [c.split(".")[0] for c in STEP_COMMENT.findall(step)]
    assert numbers == [c.split(".")[0] for c in STEP_COMMENT.findall(kernel_step)]
    assert [n.strip() for n in numbers] == ["# 3", "# 5", "# 6", "# 7"]


@pytest.mark.neutral  # the source only: once, in the jax env
def test_the_step_comments_are_the_contracts_word_for_word():
    """The lesson says the seven steps' words and nothing more (it takes no
    mask); attention.py may add to a step's words, or mark a step's line
    ahead of the step (the mask, built before attend applies it)."""
    continued = f"# 7. (continued) {CONTINUED}"
    allowed = {step_comment(n) for n in range(1, 8)} | {continued}
    for line in STEP_COMMENT.findall(read("impl_numpy", "lesson.py")):
        assert line.strip() in allowed
    for line in STEP_COMMENT.findall(read("impl_numpy", "attention.py")):
        line = line.strip()
        number = int(line[2])
        assert line == continued or line.startswith(
            (step_comment(number), f"# {number}. (ahead) ")
        ), line
    assert "# 5. mask the future (and any given mask)" in read(
        "impl_numpy", "attention.py"
    )


@pytest.mark.reads_source
@pytest.mark.neutral  # the source only: once, in the jax env
def test_comments_stay_short_in_every_backend_file():
    """Docstring and comment-only lines per line of code, at most 0.8 (what the
    codebases learners read sit at 0.3 to 0.7); a comment at a line's end is
    part of its line of code."""
    ratios = {
        str(path.relative_to(ROOT)): comment_ratio(path.read_text())
        for impl in IMPLS
        for path in sorted((ROOT / impl).glob("*.py"))
    }
    assert len(ratios) >= 24
    too_wordy = {
        path: round(r, 2) for path, r in ratios.items() if r > MAX_COMMENT_RATIO
    }
    assert not too_wordy


@pytest.mark.neutral  # the source only: once, in the jax env
def test_comment_ratio_counts_docstrings_and_comment_lines():
    code = '"""Doc\n\nstring."""\n# a comment\nx = 1  # at the end\ny = 2\n'
    assert comment_ratio(code) == 4 / 2


@pytest.mark.neutral  # the source only: once, in the jax env
def test_no_private_name_is_imported_across_files():
    for impl in (*IMPLS, "shared", "triptych"):
        for path in (ROOT / impl).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.level == 0:
                    private = [a.name for a in node.names if a.name.startswith("_")]
                    ours = (node.module or "").split(".")[0] in (*IMPLS, "shared")
                    assert not (ours and private), f"{path}: {private}"


@pytest.mark.reads_source
@pytest.mark.neutral  # the source only: once, in the jax env
def test_nothing_names_a_file_that_is_not_in_the_repository():
    named = re.compile(
        r"(?<![\w/.])((?:docs|impl_numpy|impl_torch|impl_jax|shared|triptych|tests)"
        r"/[\w/.-]*\w\.(?:py|md|json|png|npz|ini|toml))"
    )
    link = re.compile(r"\]\(([\w./-]+\.(?:md|png|json))(?:#[\w-]*)?\)")
    missing = []
    for path in texts():
        text = prose(path)
        for target in named.findall(text):
            if not (ROOT / target).exists():
                missing.append(f"{path.relative_to(ROOT)}: {target}")
        for target in link.findall(text):
            if not (path.parent / target).exists():
                missing.append(f"{path.relative_to(ROOT)}: ({target})")
        for name in re.findall(r"\b([A-Z][A-Z_]+\.md)\b", text):
            if not (ROOT / name).exists():
                missing.append(f"{path.relative_to(ROOT)}: {name}")
    assert not missing


def texts() -> list[Path]:
    """Every Python, Markdown and config file of the project."""
    found = [ROOT / "README.md", ROOT / "tox.ini", ROOT / "pyproject.toml"]
    for folder in (*IMPLS, "shared", "triptych", "tests", "docs"):
        found += [
            p for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".md", ".json")
        ]
    return found


def prose(path: Path) -> str:
    """What a reader reads in a file: a Markdown or JSON file whole, a Python
    file's comments and docstrings (its other strings are data: a planted tree
    in a test names files that are not meant to exist)."""
    source = path.read_text(errors="replace")
    if path.suffix != ".py":
        return source
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    starts = (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING)
    kept, previous = [], None  # the last token that is not a comment or a blank line
    for token in tokens:
        if token.type == tokenize.COMMENT:
            kept.append(token.string)
        elif token.type == tokenize.STRING and (previous is None or previous in starts):
            kept.append(token.string)  # a docstring: a string statement of its own
        if token.type not in (tokenize.COMMENT, tokenize.NL):
            previous = token.type
    return "\n".join(kept)


def comment_ratio(source: str) -> float:
    """Docstring lines plus comment-only lines, per line of code."""
    doc, comments, code = set(), set(), set()
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    layout = (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING)
    blank = (*layout, tokenize.NL, tokenize.ENDMARKER)
    for k, token in enumerate(tokens):
        if token.type == tokenize.COMMENT:
            comments.add(token.start[0])
        elif token.type == tokenize.STRING:
            j = k - 1
            while j >= 0 and tokens[j].type in (tokenize.NL, tokenize.COMMENT):
                j -= 1
            lines = range(token.start[0], token.end[0] + 1)
            (doc if j < 0 or tokens[j].type in layout else code).update(lines)
        elif token.type not in blank:
            code.add(token.start[0])
    return (len(doc) + len(comments - code)) / max(1, len(code))


def read(impl: str, file: str) -> str:
    return (ROOT / impl / file).read_text()


def name_of_file(backend, file: str) -> str:
    return f"impl_{name_of(backend)}/{file}"
