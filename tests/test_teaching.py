"""docs/teaching.md, the teacher's kit: its misconception sheet names every
mistake of check's catalogue that a course exercise can make (those of no
variant option), so the sheet cannot fall behind the catalogue; its figure
and the pages it links exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from triptych.check.mistakes.diagnosis import VARIANT_NEEDS
from triptych.check.mistakes.known import FILL, MISTAKES

pytestmark = pytest.mark.neutral
ROOT = Path(__file__).resolve().parents[1]
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
    for link in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", TEACHING):
        assert (ROOT / "docs" / link).exists(), link
