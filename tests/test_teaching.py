"""docs/teaching.md, the teacher's kit: its misconception sheet names every
mistake of check's catalogue that a course exercise can make (those of no
variant option), so the sheet cannot fall behind the catalogue; its figure
and the pages it links exist, and its Colab links open every notebook of
notebooks/ in the repository that notebooks/build.py names."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from triptych.check.mistakes.diagnosis import VARIANT_NEEDS
from triptych.check.mistakes.known import FILL, MISTAKES

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "notebooks"))
from build import REPOSITORY  # noqa: E402 (notebooks/build.py)

pytestmark = pytest.mark.neutral
TEACHING = (ROOT / "docs" / "teaching.md").read_text()


def sheet() -> list[str]:
    """The mistakes the misconception sheet names: its rows' first cells."""
    part = TEACHING.split("## Misconception sheet", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([^`]+)` \|", part, flags=re.M)


def test_the_sheet_names_every_mistake_a_course_exercise_can_make():
    course = [m.name for m in MISTAKES if m.needs not in VARIANT_NEEDS]
    named = sheet()
    assert [n for n in [*course, FILL.name] if n not in named] == []
    assert len(named) == len(set(named))


def test_the_kit_has_its_parts_and_its_links_resolve():
    for part in ("Learning objectives", "minute by minute", "Concept questions",
                 "Answer key", "Classroom set-up", "References"):  # fmt: skip
        assert f"## {part}" in TEACHING or part in TEACHING, part
    for name in ("Windows", "macOS", "Vaswani", "Olsson", "Dao"):
        assert name in TEACHING, name
    colab = f"https://colab.research.google.com/github/{REPOSITORY}/blob/main/"
    opened = []
    for link in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", TEACHING):
        if link.startswith("https://"):  # a notebook of the repository, in Colab
            assert link.startswith(colab), link
            opened.append(link.removeprefix(colab))
            link = f"../{opened[-1]}"
        assert (ROOT / "docs" / link).exists(), link
    built = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("notebooks/*.ipynb"))
    assert sorted(opened) == built  # every notebook has its link, and no other
