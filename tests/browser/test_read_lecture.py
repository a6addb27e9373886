"""`triptych read`'s page as a teacher uses it (issue 44): on a projector at
1024x768, printed in landscape, and followed link by link. Headless Chromium
through Playwright, as in test_read_page.py (the fixtures in conftest.py): the
checks read what the browser lays out, not the HTML text.
"""

from __future__ import annotations

import re

import pytest

from triptych.read import views

PROJECTOR = {"width": 1024, "height": 768}
LANDSCAPE = {"width": 1047, "height": 740}
"""An A4 landscape page less 10 mm margins, in CSS px: what print lays out."""
ZOOMED = {"width": 683, "height": 512}
"""The projector's 1024x768 at 150% zoom, in CSS px."""

EQUATIONS_WHOLE = """es => es.map(e => {
    const box = e.getBoundingClientRect(), m = e.querySelector('math');
    const ink = [...m.querySelectorAll('*')].map(c => c.getBoundingClientRect())
        .filter(b => b.width && b.height);
    return [e.scrollHeight <= e.clientHeight + 1, e.scrollWidth <= e.clientWidth + 1,
            ink.every(b => b.top >= box.top - 0.5 && b.bottom <= box.bottom + 0.5),
            getComputedStyle(e).overflowY, m.textContent.slice(0, 30)];})"""
"""Per equation: no vertical or horizontal scrolling (to a rounded pixel),
every part of the formula inside its box, and how the box treats overflow."""


@pytest.mark.parametrize(
    "media, viewport",
    [("screen", PROJECTOR), ("screen", ZOOMED), ("print", LANDSCAPE)],
    ids=["projector", "zoomed-150%", "print"],
)
def test_equations_render_whole_with_no_scroll_bar(loaded, media, viewport):
    page = loaded(viewport, media).page
    found = page.eval_on_selector_all(".equation", EQUATIONS_WHOLE)
    assert len(found) >= 15
    for no_vertical, no_horizontal, inside, overflow, text in found:
        assert no_vertical and no_horizontal and inside, text
        assert overflow == "visible", text  # a box that cannot grow a scroll bar


def test_projector_heatmap_labels_are_16px_and_grow_with_the_window(
    loaded,
):
    sizes = {}
    for width, height in ((1024, 768), (1600, 1000)):
        page = loaded({"width": width, "height": height}).page
        drawn = page.eval_on_selector_all(
            "#lesson svg.heatmap",
            """ms => ms.map(m => [m.getBoundingClientRect().width,
                m.getBoundingClientRect().height,
                Math.min(...[...m.querySelectorAll('text')].map(t =>
                    m.getScreenCTM().a * parseFloat(getComputedStyle(t).fontSize)))])""",
        )
        assert drawn
        for w, h, label in drawn:
            assert label >= 16  # the labels' size at a projector's 1024x768
            assert w <= width and h <= height  # one heatmap fits the screen
        sizes[width] = drawn[0][0]
    assert sizes[1600] > sizes[1024]  # drawn to grow with the window


def test_projector_identical_steps_shown_once_and_code_readable(
    loaded,
):
    """At 1024x768, a step whose lines are the same in the three frameworks is
    one cell across the row; the steps that differ keep three columns; no
    horizontal scrolling; code at 14 px or more."""
    page = loaded(PROJECTOR).page
    rows = page.eval_on_selector_all(
        "#lesson-single_head_attention-1-1, #lesson-single_head_attention-3-1, "
        "#lesson-single_head_attention-4-1, #lesson-single_head_attention-5-1, "
        "#lesson-single_head_attention-6-1, #lesson-single_head_attention-7-1",
        """rs => rs.map(r => [r.dataset.step,
            [...r.querySelectorAll(':scope > .cells > .cell')].map(c =>
                [c.className, c.getBoundingClientRect().width,
                 [...c.querySelectorAll('.src')].map(s => s.textContent)])])""",
    )
    shown = {step: cells for step, cells in rows}
    content = page.evaluate("document.querySelector('main').clientWidth")
    for step in ("1", "3", "4", "7"):
        ((css, width, _),) = shown[step]
        assert "shared" in css and width >= content - 2
    for step in ("5", "6"):
        assert [css.split()[1] for css, *_ in shown[step]] == ["numpy", "torch", "jax"]
    code = page.eval_on_selector_all(
        "#lesson div.code",
        "cs => cs.map(c => parseFloat(getComputedStyle(c).fontSize))",
    )
    assert min(code) >= 14
    scroll = page.evaluate(
        "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert scroll[0] <= scroll[1]


def test_following_a_steps_link_shows_its_title_and_nothing_sticks_over_it(
    fresh,
    page_path,
):
    page = fresh(PROJECTOR).page
    anchors = page.eval_on_selector_all(
        "#lesson .row h3 a", "as => as.map(a => a.getAttribute('href'))"
    )
    assert len(anchors) > 10
    for href in anchors[1::3]:
        page.goto(page_path.as_uri() + href)
        seen = page.evaluate(
            """id => {const h = document.querySelector(id + ' h3');
                const b = h.getBoundingClientRect();
                const e = document.elementFromPoint(b.left + 4, b.top + b.height / 2);
                return [b.top, h.contains(e)];}""",
            href,
        )
        assert 0 <= seen[0] < 100 and seen[1], href
    stuck = page.evaluate(
        """[...document.querySelectorAll('body *')].filter(e =>
            ['sticky', 'fixed'].includes(getComputedStyle(e).position) &&
            e.getClientRects().length).map(e => e.className)"""
    )
    assert stuck == []  # nothing to hide a step or a heatmap under


def test_print_is_landscape_with_the_three_columns_side_by_side(
    loaded,
    tmp_path,
):
    page = loaded(LANDSCAPE, "print").page
    rows = page.eval_on_selector_all(
        "#lesson .row .cells",
        """rs => rs.map(r => [...r.querySelectorAll(':scope > .cell')].map(c => {
            const b = c.getBoundingClientRect();
            return [b.left, b.top, b.width, getComputedStyle(c).display];}))""",
    )
    three = [cells for cells in rows if len(cells) == 3]
    assert three and len(three) < len(rows)  # the shared steps are once
    for cells in three:
        assert all(display != "none" for *_, display in cells)
        lefts = [left for left, *_ in cells]
        assert lefts == sorted(lefts) and lefts[0] + cells[0][2] <= lefts[1]
        assert max(t for _, t, *_ in cells) - min(t for _, t, *_ in cells) <= 2
    maps = page.eval_on_selector_all(
        "#lesson svg.heatmap", "ms => ms.map(m => m.getBoundingClientRect().right)"
    )
    assert maps and max(maps) <= LANDSCAPE["width"]
    pdf = tmp_path / "handout.pdf"
    page.pdf(path=str(pdf), prefer_css_page_size=True)
    boxes = re.findall(
        rb"/MediaBox\s*\[\s*0 0 ([\d.]+) ([\d.]+)\s*\]", pdf.read_bytes()
    )
    assert boxes and all(float(w) > float(h) for w, h in boxes)  # landscape


def test_masked_cells_are_distinct_from_near_zero_weights(loaded):
    page = loaded(PROJECTOR).page
    maps = page.eval_on_selector_all(
        "#lesson svg.heatmap[data-name=weights]",
        """ms => ms.map(m => [...m.querySelectorAll('rect')].map(r =>
            [r.getAttribute('fill'), r.querySelector('title').textContent]))""",
    )
    assert maps
    for cells in maps:
        T = round(len(cells) ** 0.5)
        masked = {cells[i * T + j][0] for i in range(T) for j in range(i + 1, T)}
        allowed = [cells[i * T + j] for i in range(T) for j in range(i + 1)]
        assert masked == {views.HIDDEN}
        assert views.HIDDEN not in {fill for fill, _ in allowed}
        assert any(text.endswith(": 0.000") for _, text in allowed)  # near zero
    hatched = page.eval_on_selector_all(
        "#lesson svg.heatmap[data-name=weights] path.hatch", "ps => ps.length"
    )
    assert hatched == len(maps)


def test_read_pdf_writes_the_landscape_handout_and_says_its_page_count(
    tmp_path, capsys
):
    from triptych.cli import main
    from triptych.read.handout import pages

    assert main(["read", "--output-dir", str(tmp_path), "--pdf"]) == 0
    pdf = tmp_path / "handout.pdf"
    count = pages(pdf)
    assert count > 10
    assert f"wrote {pdf}: {count} pages, A4 landscape" in capsys.readouterr().out
    boxes = re.findall(
        rb"/MediaBox\s*\[\s*0 0 ([\d.]+) ([\d.]+)\s*\]", pdf.read_bytes()
    )
    assert len(boxes) == count and all(float(w) > float(h) for w, h in boxes)


def test_presentation_mode_steps_forward_and_back(fresh):
    """P enters at the slide in view, one slide on the screen; the right and
    left arrows move; Esc leaves with the whole page back."""
    page = fresh(PROJECTOR).page
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))

    def shown():
        return page.evaluate(
            """[...document.querySelectorAll('.chapter-head, .row, .slide')]
                .filter(s => s.getClientRects().length)
                .map(s => s.id || s.parentElement.id)"""
        )

    whole = shown()
    assert len(whole) > 100
    page.keyboard.press("p")
    assert page.evaluate("document.body.classList.contains('present')")
    assert shown() == ["buildup"]  # chapter 0's head, in view at the top
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    assert shown() == [whole[2]]
    size = page.evaluate(
        "parseFloat(getComputedStyle(document.querySelector('.row.current .text')"
        " || document.querySelector('.row.current h3')).fontSize)"
    )
    assert size >= 20  # read from the back of a room
    page.keyboard.press("ArrowLeft")
    assert shown() == [whole[1]]
    page.keyboard.press("Escape")
    assert shown() == whole and errors == []
    page.click("#present")
    assert len(shown()) == 1


def test_every_link_works_wherever_the_page_is_copied(fresh, page_path, tmp_path):
    """The page copied alone to another folder: every link is inside the page
    (a code line's number lands on that line of the file, whole at the end),
    and the line there is the line shown."""
    import shutil

    copy = tmp_path / "course-site" / "attention.html"
    copy.parent.mkdir()
    shutil.copy(page_path, copy)
    page = fresh(PROJECTOR, path=copy).page
    links = page.eval_on_selector_all(
        "a[href]",
        """as => as.map(a => {const h = a.getAttribute('href');
            const to = h.startsWith('#') ? document.getElementById(
                decodeURIComponent(h.slice(1))) : null;
            return [h, !!to, a.classList.contains('ln') ?
                [a.parentElement.querySelector('.src').textContent,
                 to && to.textContent.replace(/^\\d+/, '').replace(/\\n$/, '')] : null];
        })""",
    )
    assert len(links) > 300
    for href, lands, line in links:
        assert href.startswith("#") and lands, href
        if line is not None:
            assert line[0] == line[1], href
    page.goto(copy.as_uri() + "#src/impl_numpy/lesson.py:27")
    top = page.evaluate(
        "document.getElementById('src/impl_numpy/lesson.py:27')"
        ".getBoundingClientRect().top"
    )
    assert 0 <= top < 100


def test_at_150_percent_zoom_the_columns_stay_side_by_side(loaded):
    page = loaded(ZOOMED).page
    rows = page.eval_on_selector_all(
        "#lesson .row .cells",
        """rs => rs.map(r => [...r.querySelectorAll(':scope > .cell')]
            .filter(c => getComputedStyle(c).display !== 'none').length)""",
    )
    assert set(rows) == {1, 3} and rows.count(3) >= 4  # shared once, or three
    scroll = page.evaluate(
        "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert scroll[0] <= scroll[1]


def math_font() -> bool:
    """Whether a font with a MATH table is installed (fontconfig knows it)."""
    import shutil
    import subprocess

    if not shutil.which("fc-list"):
        return False
    names = subprocess.run(["fc-list"], capture_output=True, text=True).stdout
    return any(
        f in names for f in ("Math TeX Gyre", "STIX Two Math", "Latin Modern Math")
    )


@pytest.mark.skipif(not math_font(), reason="no font with a MATH table to stretch")
def test_brackets_stretch_to_their_content(loaded):
    """softmax( ... ) around a fraction: the brackets as tall as the fraction,
    and the mask's brace as tall as its two cases."""
    page = loaded(PROJECTOR).page
    sizes = page.evaluate(
        """(() => {const m = document.querySelector('#lesson .equation math');
            const h = e => e.getBoundingClientRect().height;
            const open = [...m.querySelectorAll('mo')].find(o => o.textContent === '(');
            const brace = [...m.querySelectorAll('mo')].find(o => o.textContent === '{');
            return [h(open), h(m.querySelector('mfrac')), h(brace),
                    h(m.querySelector('mtable'))];})()"""
    )
    paren, fraction, brace, cases = sizes
    assert paren >= 0.9 * fraction and brace >= 0.9 * cases, sizes


def test_chapter_0_shows_every_stage_with_its_distances_in_each_framework(fresh):
    """At 1024x768, before the lesson: a row per stage of buildup.py with the
    three frameworks' code side by side (once where it is the same lines),
    and under it a table with each
    framework's distance from the stage before and from the float64 oracle,
    all within the tolerance; the stripe's answer shows only once clicked."""
    from triptych.read import lecture

    page = fresh(PROJECTOR).page
    first = page.eval_on_selector_all("section.chapter", "s => s[0].id")
    assert first == "buildup"
    for stage in lecture.STAGES:
        row = f"#buildup-{stage}-head-head"
        cells = page.eval_on_selector_all(
            f"{row} .cell", "cs => cs.map(c => c.className)"
        )
        shown = [c.split()[1] for c in cells]  # one cell where the lines agree
        assert shown in (["numpy", "torch", "jax"], ["shared"]), stage
        table = page.query_selector(f"{row} table.measured")
        assert table.is_visible(), stage
        heads = table.eval_on_selector_all("th", "hs => hs.map(h => h.textContent)")
        assert {"NumPy", "PyTorch", "JAX", "from the float64 oracle"} <= set(heads)
        bad = table.eval_on_selector_all("td.bad", "ts => ts.length")
        assert bad == 0, stage
    answer = page.query_selector("#predict-the-stripe details.answer table")
    assert not answer.is_visible()
    page.click("#predict-the-stripe summary")
    assert answer.is_visible()
