"""`triptych read` without a browser: the chapters read and align the files,
the tokens that differ from NumPy's are marked, the command's files and exit
codes. tests/browser/test_read_page.py checks the page in Chromium."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

from shared.steps import STEPS
from triptych.cli import main
from triptych.read import chapters
from triptych.read.rows import ROOT, pieces_of, rows_of
from triptych.read.tokens import is_docstring, marked, tokens_of

# the repository (README, docs, tests), which an installed package lacks
REPO = Path(__file__).resolve().parent.parent


def test_the_lesson_chapter_has_a_row_per_step_in_every_backend():
    lesson = chapters.CHAPTERS[0]
    rows = rows_of(lesson, ["numpy", "torch", "jax"])
    for function in ("single_head_attention", "multi_head_attention"):
        steps = [r.step for r in rows if r.key[0] == function and r.step]
        merge = [7] if function == "multi_head_attention" else []  # (continued)
        assert steps == [*range(1, 8), *merge]
    for row in rows:
        assert all(piece is not None for piece in row.pieces.values())
        if row.step:
            comment = row.pieces["numpy"].lines[0][1].strip()
            assert comment == f"# {row.step}. {row.words}"
            assert row.words == STEPS[row.step - 1] or row.continued


def test_a_piece_is_the_files_own_lines():
    for chapter in chapters.CHAPTERS:
        for piece in pieces_of("jax", chapter):
            source = (ROOT / piece.path).read_text().splitlines()
            for number, text in piece.lines:
                assert source[number - 1] == text


def test_rows_keep_numpys_order_and_mark_what_autodiff_replaces():
    backward = next(c for c in chapters.CHAPTERS if c.slug == "backward")
    rows = rows_of(backward, ["numpy", "torch", "jax"])
    hand_only = [r for r in rows if r.pieces["torch"] is None]
    assert {r.key[0] for r in hand_only} >= {"attend_backward", "project_backward"}
    assert all(r.pieces["numpy"] is not None for r in rows)


def test_the_kernel_chapter_reads_numpys_blockwise_beside_the_two_kernels():
    kernel = next(c for c in chapters.CHAPTERS if c.slug == "kernel")
    rows = rows_of(kernel, ["numpy", "torch", "jax"])
    paths = {name: rows[0].pieces[name].path for name in ("numpy", "torch", "jax")}
    assert paths == {
        "numpy": "impl_numpy/blockwise.py",
        "torch": "impl_torch/kernel.py",
        "jax": "impl_jax/kernel.py",
    }
    step = [r.step for r in rows if r.key[0] == "online_softmax_step" and r.step]
    assert step == [3, 5, 6, 7]  # blockwise's steps, one row each, in every backend
    kernel_rows = [r for r in rows if r.key[0] == "blockwise_attention"]
    assert [r.step for r in kernel_rows] == [None, 4, 6, 6, 7]  # in step order
    loop, end = kernel_rows[2], kernel_rows[3]
    assert loop.words.startswith("(loop) softmax, online: ")  # the double loop
    assert end.words.startswith("(end) normalize: ")
    (nan,) = [r for r in kernel_rows if r.pieces["torch"] is None]
    assert nan.key[1] == "# 7. (end)"  # flash_attention does it, around the kernel
    for row in rows:
        if row is not nan:
            assert all(piece is not None for piece in row.pieces.values()), row.key


def test_only_the_tokens_that_differ_from_numpy_are_marked():
    numpy_line = "    exp = np.exp(scores - scores.max(axis=-1, keepdims=True))"
    torch_line = "    exp = torch.exp(scores - scores.amax(dim=-1, keepdim=True))"
    (line,) = marked([torch_line], [numpy_line])
    assert "".join(t.text for t in line) == torch_line
    assert {t.text for t in line if t.differs} == {"torch", "amax", "dim", "keepdim"}
    (same,) = marked([numpy_line], [numpy_line])
    assert not any(t.differs for t in same)
    (alone,) = marked(["    x = 1"], [])
    assert all(t.differs for t in alone if t.text.strip())


def test_read_writes_one_self_contained_page(tmp_path, capsys):
    assert main(["read", "--backends", "numpy", "--output-dir", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.html"]
    text = (tmp_path / "index.html").read_text()
    # one inline script, the presentation mode's; nothing from elsewhere
    assert text.count("<script") == 1 and "<script>" in text
    # no link or source elsewhere (the files whole at the end quote URLs as text)
    assert not re.search(r'(href|src|url)[=(]"?https?://', text)
    assert capsys.readouterr().out.startswith(f"wrote {tmp_path / 'index.html'}")
    assert "Layer 1 of the trained model (shared/fixtures/induction.npz" in text
    assert "reading &quot;the cat sat on a mat and slept the cat sat" in text
    roles = text[text.index('<ul class="roles">') :].split("</ul>")[0]
    assert roles.count("<li>head ") == 4 and roles.count(": induction head: ") == 4
    ids = re.findall(r'\bid="([^"]+)"', text)
    assert len(ids) == len(set(ids)) > 100  # '7. (continued)', '6. (end)': their own


def test_random_weights_keep_the_toy_sentence(tmp_path, capsys):
    argv = ["read", "--backends", "numpy", "--weights", "random"]
    assert main([*argv, "--output-dir", str(tmp_path)]) == 0
    text = (tmp_path / "index.html").read_text()
    assert "The toy sentence &quot;the cat sat on the mat . and&quot; (preset tiny" in (
        text
    )
    assert '<ul class="roles">' not in text
    argv = ["read", "--preset", "full", "--weights", "trained"]
    assert main([*argv, "--output-dir", str(tmp_path / "no")]) == 2
    err = capsys.readouterr().err
    assert "--preset full chooses random weights" in err and err.count("\n") == 1


def test_a_backend_that_is_not_installed_says_so_and_the_others_build(
    tmp_path, monkeypatch
):
    monkeypatch.setitem(sys.modules, "impl_torch", None)
    argv = ["read", "--backends", "numpy,torch", "--output-dir", str(tmp_path)]
    assert main(argv) == 0
    text = (tmp_path / "index.html").read_text()
    assert "backend &#x27;torch&#x27; is not installed" in text
    assert 'data-file="impl_torch/lesson.py"' in text  # its code still shows


@pytest.mark.parametrize(
    "argv",
    [["--backends", "tf"], ["--preset", "long"], ["--dtype", "int8"]],
)
def test_bad_input_is_one_line_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["read", *argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("triptych read: error: ")


def test_an_unwritable_output_directory_is_one_line_exit_2(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert main(["read", "--output-dir", str(blocker)]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("triptych read: error: cannot write to ")
        and err.count("\n") == 1
    )
    assert blocker.read_text() == "not a directory"


def reading_order(text: str, heading: str) -> list[str]:
    """The file each numbered item under `heading` names first."""
    section = text[text.index(heading) :].split("\n## ")[0]
    items = re.findall(r"^\d+\. .*?`impl_[*a-z]+/(\w+\.py)`", section, re.M)
    return items


def test_one_reading_order_everywhere():
    """README.md, docs/reading.md and the page's chapters list the same files
    in the same order (flax's training step sits beside train.py's), and the
    lab names the chapter after the lesson."""
    from triptych.common.reading import ORDER

    order = list(dict.fromkeys(c.file for c in chapters.CHAPTERS))
    assert order == [file for file, _ in ORDER]
    readme = (REPO / "README.md").read_text()
    reading = (REPO / "docs" / "reading.md").read_text()
    assert reading_order(readme, "## Reading order") == order
    assert reading_order(reading, "## The order") == order
    assert order[:2] == ["lesson.py", "attention.py"] and order[-1] == "kernel.py"
    assert {"sharded.py", "train.py"} <= set(order)
    from triptych.lab import next_text

    assert next_text("jax").startswith(
        "next in the reading order: impl_jax/attention.py"
    )


def test_equations_stand_beside_the_steps_as_well_formed_mathml():
    """MathML (no script, no font from elsewhere) for the whole attention, each
    lesson step but the reshape, the online-softmax update and the softmax's
    backward; each one parses as XML and says what it is to a screen reader.
    tests/browser/ checks that Chromium lays them out."""
    import xml.etree.ElementTree as ET

    from triptych.read import equations

    lesson = rows_of(chapters.CHAPTERS[0], ["numpy"])
    beside = {
        (r.key[0], r.step, r.continued): equations.for_row(
            "lesson", r.key[0], r.step, r.words
        )
        for r in lesson
        if r.step
    }
    assert [s for (f, s, _), e in beside.items() if e is None] == [2, 2]
    assert beside[("multi_head_attention", 7, True)] == equations.MERGE
    found = []
    for slug in ("blockwise", "backward"):
        chapter = next(c for c in chapters.CHAPTERS if c.slug == slug)
        rows = rows_of(chapter, ["numpy"])
        found += [equations.for_row(slug, r.key[0], r.step, r.words) for r in rows]
    assert equations.ONLINE in found and equations.SOFTMAX_BACKWARD in found
    assert equations.NORMALIZE in found
    for mathml in [*beside.values(), *found, *equations.CHAPTER.values()]:
        if mathml is None:
            continue
        element = ET.fromstring(mathml)
        assert element.tag == "math" and element.get("aria-label")


def test_every_difference_on_the_page_is_checked_by_a_test_that_exists():
    """Each difference a chapter lists names the test that runs the
    alternative (tests/test_torch_prose.py, tests/test_jax_prose.py, or a
    test of the chapter's code); a style choice is marked as one."""
    from triptych.read.text import CHAPTER_TEXT, Difference

    assert set(CHAPTER_TEXT) == {c.slug for c in chapters.CHAPTERS}
    styles = []
    for _, differences in CHAPTER_TEXT.values():
        assert differences
        for difference in differences:
            assert isinstance(difference, Difference)
            path, test = difference.checked_by.split("::")
            source = (REPO / path).read_text()
            assert f"def {test}(" in source, difference.checked_by
            styles += [difference.text] if difference.style else []
    assert any("swapaxes" in s for s in styles) and any(
        "torch.inf" in s for s in styles
    )
    assert any("axis=" in s for s in styles)


def test_a_docstrings_later_lines_are_string_not_code():
    lines = [
        'def f(x) -> "out":',
        '    """The cache',
        "    with it.",
        '    """',
        "    x",
    ]
    found = tokens_of(lines)
    assert [is_docstring(line) for line in found] == [
        False,
        True,
        True,
        True,
        False,
    ]
    assert "->" in [t.text for t in found[0]]  # one token: never cut in two
    assert not any(t.css == "k" for t in found[2])  # "with" is a word here


def test_step_4s_words_hold_at_initialisation_and_not_after_training():
    """The scale's claim, measured: scores of independent unit-variance
    entries have variance D, and 1 / sqrt(D) brings it to 1; the trained
    model on the page has scaled scores far past unit size and saturated
    weights, which the words say rather than deny."""
    from shared.reference import reference_steps
    from triptych.common import trained
    from triptych.read.text import STEP_TEXT

    D = 16
    q, k = np.random.default_rng(0).standard_normal((2, 20_000, D))
    dots = (q * k).sum(-1)
    assert 0.9 * D < dots.var() < 1.1 * D
    assert 0.9 < (dots / np.sqrt(D)).var() < 1.1
    view = trained.view()
    f = view.fixture
    steps = reference_steps(f.x, *trained.head_columns(f, view.head), None, 1)
    assert np.abs(steps[4]["scores"]).max() > 10  # far past unit size
    assert steps[6]["weights"].max(-1).max() > 0.99  # saturated rows
    words = STEP_TEXT[4]
    assert "initialisation" in words and "unit variance" in words
    assert "far past unit size" in words and "saturated" in words


def test_the_lesson_chapter_explains_positions_and_induction_heads():
    """Before the frameworks' spellings, the chapter says what attention is
    for, what positions add, and what an induction head is, with the paper
    and the stripe it draws on the page's sentence (row 8 attends column 1:
    the word after the previous 'the')."""
    from triptych.common import trained
    from triptych.read.text import CHAPTER_TEXT

    intro, _ = CHAPTER_TEXT["lesson"]
    paragraphs = intro.split("\n\n")
    assert len(paragraphs) >= 3
    assert paragraphs[1].startswith("Positions.") and "pos[t]" in paragraphs[1]
    heads = paragraphs[2]
    assert "Olsson" in heads and "previous-token head" in heads
    assert "induction head" in heads
    words = trained.SENTENCE
    assert words[8] == words[0] and "row 8" in heads and "column 1" in heads
    assert f"'{words[1]}'" in heads


def test_pdf_without_chromium_is_one_line_exit_2_before_any_work(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("CHROMIUM", str(tmp_path / "no-chromium"))
    assert main(["read", "--output-dir", str(tmp_path / "out"), "--pdf"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "triptych read: error: --pdf prints with Chromium, and none was found: "
        "install chromium or set CHROMIUM to its path"
    ]
    assert not (tmp_path / "out").exists()


def test_tokens_put_a_sentence_of_ones_own_on_the_page(tmp_path, capsys):
    """--tokens as for run: the trained model reads the words, the heatmaps
    and tables label them with their index; a word the model does not know
    is one line, exit 2, before any work."""
    words = ["king", "wore", "gold", "crown", "she", "drew", "small", "house"] * 2
    argv = ["read", "--backends", "numpy", "--output-dir", str(tmp_path / "ok")]
    assert main([*argv, "--tokens", " ".join(words)]) == 0
    text = (tmp_path / "ok" / "index.html").read_text()
    assert f"reading &quot;{' '.join(words)}&quot;" in text
    assert '<text class="query" x="' in text
    for i, w in enumerate(words):
        assert f">{i} {w}</text>" in text
    capsys.readouterr()
    bad = ["read", "--output-dir", str(tmp_path / "bad"), "--tokens", "king zebra"]
    assert main(bad) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("triptych read: error: --tokens: ") and "'zebra'" in line
    assert not (tmp_path / "bad").exists()
