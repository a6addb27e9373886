"""Every example in the docs runs here, so no document can go stale.

Each ```python block of docs/differences.md, docs/reading.md,
docs/backward.md, docs/layers.md, docs/sharding.md, docs/train.md and
docs/teaching.md is one test, executed as it stands in a fresh namespace; its
asserts are the claims the text makes. The frameworks a
block imports decide where it runs: one that imports torch runs when the torch
backend is selected (tox -e torch, crosscheck), one that imports jax or flax
when jax is, and the others everywhere. `tox -e crosscheck` runs every block.
Facts about GPUs and TPUs are stated in the text with their source, never in a
block: this suite runs on the CPU.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import NamedTuple

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
DOCUMENTS = (
    "differences.md",
    "reading.md",
    "backward.md",
    "layers.md",
    "sharding.md",
    "train.md",
    "teaching.md",
)


class Example(NamedTuple):
    """One ```python block of the document."""

    name: str  # document, section slug and number, e.g. "differences-mask-polarity-2"
    path: Path  # the document
    line: int  # the line of its first statement in the document
    code: str
    needs: frozenset[str]  # backends whose framework it imports


def needs_of(code: str) -> frozenset[str]:
    """The backends whose frameworks `code` imports: torch, and jax (jax, flax)."""
    modules = set()
    for line in code.splitlines():
        if match := re.match(r"\s*from\s+(\w+)", line):
            modules.add(match[1])
        elif match := re.match(r"\s*import\s+(.+)", line):
            modules |= {part.split()[0].split(".")[0] for part in match[1].split(",")}
    needs = set()
    if modules & {"torch", "impl_torch"}:
        needs.add("torch")
    if modules & {"jax", "flax", "impl_jax"}:
        needs.add("jax")
    return frozenset(needs)


def examples() -> list[Example]:
    """Every ```python block of every document, in order."""
    found = []
    for document in DOCUMENTS:
        path = DOCS / document
        text = path.read_text()
        counts: dict[str, int] = {}
        for match in re.finditer(r"^```python\n(.*?)^```$", text, re.S | re.M):
            before = text[: match.start()]
            headings = re.findall(r"^##? (.+)$", before, re.M)
            slug = re.sub(r"[^a-z0-9]+", "-", headings[-1].lower()).strip("-")
            slug = f"{path.stem}-{slug}"
            counts[slug] = counts.get(slug, 0) + 1
            code = match.group(1)
            found.append(
                Example(
                    f"{slug}-{counts[slug]}",
                    path,
                    before.count("\n") + 2,
                    code,
                    needs_of(code),
                )
            )
    return found


def pytest_generate_tests(metafunc):
    if "example" in metafunc.fixturenames:
        selected = set(metafunc.config.selected_backends)
        runnable = [
            pytest.param(e, marks=[pytest.mark.crosscheck] if len(e.needs) > 1 else [])
            for e in examples()
            if e.needs <= selected
        ]
        metafunc.parametrize(
            "example", runnable, ids=[p.values[0].name for p in runnable]
        )


def test_docs_example_runs(example):
    padded = "\n" * (example.line - 1) + example.code  # tracebacks point at the doc
    exec(compile(padded, str(example.path), "exec"), {"__name__": example.name})


def test_the_docs_hold_examples_for_every_framework():
    found = examples()
    assert len({e.name for e in found}) == len(found)
    # test_docs_example_runs has no assert of its own: a block's asserts are
    # what it checks, and a block without one would pass whatever it computes
    for e in found:
        tree = ast.parse(e.code)
        assert any(isinstance(node, ast.Assert) for node in ast.walk(tree)), (
            f"docs/{e.path.name} line {e.line}: block {e.name} asserts nothing"
        )
    for needs in (frozenset(), frozenset({"torch"}), frozenset({"jax"})):
        assert any(e.needs == needs for e in found), f"no example needs {set(needs)}"
