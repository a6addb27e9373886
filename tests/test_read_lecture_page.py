"""The page's lecture chapters (triptych read, issue 44): chapter 0's build-up
before the lesson, the fused forms at the lesson's end, what each framework
adds after it, each row with its measured distances, and "predict the stripe"
with its answer folded. The page is built once, in NumPy (the values of
every framework are tested in tests/test_buildup.py and test_*extras.py;
tests/browser/ reads the page with all three)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from triptych.cli import main
from triptych.common import backends, trained
from triptych.read import chapters, lecture
from triptych.read.lecture_text import LECTURE_TEXT


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("read")
    assert main(["read", "--backends", "numpy", "--output-dir", str(out)]) == 0
    return (out / "index.html").read_text()


def section(page: str, slug: str) -> str:
    start = page.index(f'<section class="chapter" id="{slug}">')
    return page[start : page.index("</section>", start)]


def distances(html: str, function: str) -> list[float]:
    """The data-distance of each cell of a function's measured table."""
    table = re.search(
        rf'<table class="measured" data-function="{function}">.*?</table>', html, re.S
    )
    assert table, function
    return [float(d) for d in re.findall(r'data-distance="([^"]+)"', table[0])]


def test_chapter_0_stands_before_the_lesson_and_frameworks_after_it(page):
    found = re.findall(r'<section class="chapter" id="(\w+)">', page)
    assert found == [c.slug for c in chapters.PAGE]
    assert found[:3] == ["buildup", "lesson", "frameworks"]
    assert '<nav><ol start="0">' in page  # chapter 0, then the lesson as 1
    assert 'Next: <a href="#lesson">1. ' in page


def test_each_stage_shows_its_distances_as_measured(page):
    """Stage by stage, the distance from the stage before and from the
    oracle are what lecture.buildup measures, the equal stages said so."""
    view = trained.view()
    numpy = backends.load_backend("numpy")
    expected = lecture.oracles(view, backends.load_backend)
    given = lecture.inputs(numpy, view, "float32")
    measured = lecture.buildup("numpy", numpy, given, expected, "float32")
    chapter = section(page, "buildup")
    for stage in lecture.STAGES:
        assert f'id="buildup-{stage}-head-head"' in chapter
        m = measured[stage]
        shown = [m.error] if m.before is None else [m.before, m.error]
        assert distances(chapter, stage) == shown, stage
    for stage in ("average_matmul", "average_softmax", "one_head"):
        assert measured[stage].same
    assert not measured["dot_product"].same and not measured["scaled"].same
    assert "(a new idea)" in chapter and "(the same)" in chapter
    assert "(20,000 draws)" in chapter  # the scale's variance, measured


def test_the_lesson_ends_with_the_fused_forms_and_numpy_says_it_has_none(page):
    lesson = section(page, "lesson")
    fused = lesson[lesson.index('<div class="fused slide" id="fused">') :]
    assert "None exists: this framework has no fused attention" in fused
    assert "F.scaled_dot_product_attention(q, k, v, is_causal=True)" in fused
    assert "jax.nn.dot_product_attention(q, k, v, is_causal=True)" in fused


def test_what_each_framework_adds_is_read_from_extras_and_measured(page):
    chapter = section(page, "frameworks")
    intro, _ = LECTURE_TEXT["frameworks"]
    for words in ("broadcasts", "tape", "jaxpr", "static", "vmap"):
        assert words in intro
    for function in ("every_head", "gradient"):
        (error,) = distances(chapter, function)
        assert error < 1e-3, function
    assert 'data-file="impl_numpy/extras.py"' in chapter


def test_predict_the_stripe_folds_the_measured_answer(page):
    """The answer is the oracle's weights of the one-head lesson's head: for
    each row whose word came before, the column after its last occurrence,
    and the column attended most; folded in a <details> that is not open."""
    view = trained.view()
    tokens = view.labels
    contents = page[page.index('<nav><ol start="0">') : page.index("</nav>")]
    assert '<a href="#predict-the-stripe">Exercise: predict the stripe</a>' in contents
    block = page[page.index('<div class="predict slide" id="predict-the-stripe">') :]
    block = block[: block.index("</details>")]
    assert '<details class="answer"><summary>' in block
    rows = re.findall(
        r'data-row="(\d+)" data-expected="(\d+)" data-attended="(\d+)"', block
    )
    expected = lecture.oracles(view, backends.load_backend)["weights"]
    assert rows == [
        (str(i), str(i - 7), str(int(np.argmax(expected[i])))) for i in range(8, 16)
    ]
    assert tokens[8] == tokens[0] and f"{tokens[1]}" in block
    assert "triptych read --tokens" in block


def test_a_stage_that_breaks_is_shown_and_fails_the_build(
    tmp_path, monkeypatch, capsys
):
    """Exit 1, the cell says so: a stage that no longer equals the one before."""
    from impl_numpy import buildup

    monkeypatch.setattr(buildup, "average_softmax", buildup.dot_product)
    argv = ["read", "--backends", "numpy", "--output-dir", str(tmp_path)]
    assert main(argv) == 1
    chapter = section((tmp_path / "index.html").read_text(), "buildup")
    assert "(NOT the same)" in chapter


def test_every_difference_of_the_lecture_chapters_names_a_test_that_exists():
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    assert set(LECTURE_TEXT) == {"buildup", "frameworks"}
    for _, differences in LECTURE_TEXT.values():
        assert differences
        for difference in differences:
            path, test = difference.checked_by.split("::")
            assert f"def {test}(" in (repo / path).read_text(), difference.checked_by
