"""`triptych read`'s page, in a real browser: headless Chromium (Debian's
`chromium`, launched by path) driven by Playwright. Run by `tox -e browser`
(`pytest tests/browser --browser`); the checks read what the browser lays out
and shows, not the HTML text.

The page is built once per session (conftest.py) into a temporary directory and opened from
`file://`; a screenshot of it at 1400 px goes to outputs/read/screenshot.png
(the README's image, docs/img/read.png, is a copy of one).
"""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np

from shared import registry
from triptych.common import trained
from triptych.common.walk import walk
from triptych.read import views
from triptych.read.chapters import PAGE
from triptych.read.values import step_key

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = registry.names()
WIDE, NARROW = 1400, 420


def window(width):
    """The window of a screen `width` px wide."""
    return {"width": width, "height": 900}


def test_the_page_loads_from_file_with_no_error_and_no_other_origin(loaded):
    page, requests, errors = loaded(window(WIDE))
    assert errors == []
    assert requests and all(url.startswith(("file://", "data:")) for url in requests)
    assert page.title().startswith("Attention Triptych")
    chapters = page.eval_on_selector_all("section.chapter", "s => s.map(e => e.id)")
    assert chapters == [c.slug for c in PAGE]  # chapter 0, then the reading order
    assert {"sharded", "train", "train_flax"} <= set(chapters)
    following = page.eval_on_selector_all(
        "nav.next a", "ns => ns.map(n => n.getAttribute('href'))"
    )
    assert following[: len(chapters) - 1] == [f"#{c}" for c in chapters[1:]]


def test_wide_screen_the_cells_of_a_row_stand_side_by_side_at_one_height(loaded):
    page, _, _ = loaded(window(WIDE))
    boxes = page.eval_on_selector_all(
        ".row .cells",
        """rows => rows.map(r => [...r.querySelectorAll(':scope > .cell')].map(c => {
            const b = c.getBoundingClientRect();
            return [b.left, b.top, b.width];
        }))""",
    )
    assert len(boxes) > 50
    for cells in boxes:
        if len(cells) == 1:  # the same lines in every framework: once, across
            continue
        assert len(cells) == 3
        tops = [top for _, top, _ in cells]
        assert max(tops) - min(tops) <= 2
        lefts = [left for left, _, _ in cells]
        assert lefts == sorted(lefts) and lefts[0] + cells[0][2] <= lefts[1]
    scroll = page.evaluate(
        "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert scroll[0] <= scroll[1]  # no horizontal scrolling
    out = ROOT / "outputs" / "read"
    out.mkdir(parents=True, exist_ok=True)
    page.evaluate(
        "document.getElementById('lesson-single_head_attention-5-1').scrollIntoView()"
    )
    page.screenshot(path=str(out / "screenshot.png"))
    assert (out / "screenshot.png").stat().st_size > 10_000


def test_narrow_screen_shows_one_backend_and_the_switch_changes_it(fresh):
    page, _, errors = fresh(window(NARROW))

    def shown():
        return page.evaluate(
            """names => names.filter(n => [...document.querySelectorAll(
                '.row .cell.' + n)].every(c => getComputedStyle(c).display !== 'none'))""",
            list(BACKENDS),
        )

    assert shown() == ["numpy"]
    page.click("label[for=show-torch]")
    assert shown() == ["torch"]
    page.click("label[for=show-jax]")
    assert shown() == ["jax"]
    scroll = page.evaluate(
        "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert scroll[0] <= scroll[1] and errors == []


def test_every_code_line_shown_is_a_line_of_the_named_file(loaded):
    page, _, _ = loaded(window(WIDE))
    lines = page.eval_on_selector_all(
        ".line",
        """ls => ls.map(l => [l.dataset.file, +l.dataset.line,
            l.querySelector('.src').textContent, l.querySelector('.ln').textContent])""",
    )
    assert len(lines) > 300
    files: dict[str, list[str]] = {}
    for path, number, text, shown_number in lines:
        source = files.setdefault(path, (ROOT / path).read_text().splitlines())
        assert text == source[number - 1], f"{path}:{number}"
        assert int(shown_number) == number
    assert {p.split("/")[0] for p in files} == {f"impl_{b}" for b in BACKENDS}


def test_each_step_shows_what_the_backend_computes(loaded):
    """Under each lesson row, once: each array the step made, NumPy's values
    whole (the fold's table, as views.number prints them) and every backend's
    distance from the oracle, all within the tolerance."""
    page, _, _ = loaded(window(WIDE))
    shown = page.eval_on_selector_all(
        "#lesson .row .computed .array",
        """as => as.map(a => [a.closest('.row').dataset.function,
            a.closest('.row').dataset.step, a.dataset.name, a.dataset.shape,
            [...a.querySelectorAll('table.every td')].map(td => td.textContent),
            [...a.querySelectorAll('.agree')].map(s => [s.dataset.backend,
                s.dataset.within, s.dataset.error])])""",
    )
    view = trained.view()  # the page's default: the trained model's layer 1
    runs = {
        (name, function): walk(
            name,
            view.fixture,
            "float32",
            multi=function == "multi_head_attention",
            head=view.head,
        )
        for name in BACKENDS
        for function in ("single_head_attention", "multi_head_attention")
    }
    made = {
        (name, function, str(step_key(run_step.step)), m.name): m
        for (name, function), run in runs.items()
        for run_step in run.steps
        for m in run_step.made
    }
    assert len(shown) == len(made) // len(BACKENDS)
    for function, step, variable, shape, cells, agreements in shown:
        m = made[("numpy", function, step, variable)]
        assert shape == ", ".join(map(str, m.shape))
        value = np.asarray(m.value)
        value = value if value.dtype == bool else value.astype(np.float64)
        expected = [html.unescape(views.number(v)) for v in value.ravel()]
        assert cells == expected, (function, step, variable)
        assert [b for b, _, _ in agreements] == list(BACKENDS)
        for backend, within, error in agreements:
            assert made[(backend, function, step, variable)].shape == m.shape
            assert within == "true"
            assert error == "" if value.dtype == bool else float(error) < 1e-4


def test_every_heatmap_is_labelled_with_the_tokens_and_has_its_scale(loaded):
    page, _, _ = loaded(window(WIDE))
    maps = page.eval_on_selector_all(
        "#lesson .computed svg.heatmap",
        """ms => ms.map(m => [m.closest('.row').dataset.function, m.dataset.name,
            [...m.querySelectorAll('text.query')].map(t => t.textContent),
            [...m.querySelectorAll('text.key')].map(t => t.textContent),
            new Set([...m.querySelectorAll('rect')].map(r => r.getAttribute('fill')))
                .size, m.getBoundingClientRect().width,
            m.closest('figure').querySelector('figcaption').textContent,
            !!m.closest('.array').querySelector('.scale')])""",
    )
    labels = [f"{i} {w}" for i, w in enumerate(trained.SENTENCE)]  # indexed
    by_kind = {}
    for function, name, queries, keys, colours, width, caption, scale in maps:
        by_kind.setdefault((function, name), []).append(caption)
        assert queries == labels and keys == labels
        assert width > 200 and scale
        assert colours == 2 if name == "causal" else colours > 10
    roles = [f"head {h}: induction" for h in range(4)]
    assert by_kind[("multi_head_attention", "weights")] == roles  # every head
    # the raw, scaled and masked scores (steps 3, 4 and 5) drawn too
    assert by_kind[("multi_head_attention", "scores")] == roles * 3
    assert by_kind[("single_head_attention", "weights")] == [roles[trained.view().head]]
    assert all(
        c == ["the causal mask (one for every head)"]
        for (_, n), c in by_kind.items()
        if n == "causal"
    )


def test_the_equations_are_laid_out_as_mathml(loaded):
    """Chromium lays MathML out itself: every equation has a box, and a
    fraction's numerator stands above its denominator."""
    page, _, _ = loaded(window(WIDE))
    boxes = page.eval_on_selector_all(
        ".equation math",
        """ms => ms.map(m => {const b = m.getBoundingClientRect();
            return [m.namespaceURI, b.width, b.height,
                    m.closest('section').id];})""",
    )
    assert len(boxes) >= 15
    assert {s for *_, s in boxes} >= {"lesson", "blockwise", "backward"}
    for namespace, width, height, _ in boxes:
        assert namespace == "http://www.w3.org/1998/Math/MathML"
        assert width > 0 and height > 0
    fractions = page.eval_on_selector_all(
        ".equation mfrac",
        """fs => fs.map(f => [f.children[0].getBoundingClientRect().bottom,
            f.children[1].getBoundingClientRect().top])""",
    )
    assert fractions and all(above <= below + 1 for above, below in fractions)
    # MathML trims a token's edge spaces: "if j" must not be laid out "ifj"
    widths = page.eval_on_selector_all(
        ".equation mtext",
        """ts => ts.filter(t => /\\s$/.test(t.textContent)).map(t => {
            const bare = t.cloneNode(false);
            bare.textContent = t.textContent.trim();
            t.after(bare);
            const pair = [t.getBoundingClientRect().width,
                          bare.getBoundingClientRect().width];
            bare.remove();
            return pair;})""",
    )
    assert widths and all(spaced > bare + 1 for spaced, bare in widths), widths


def test_docstrings_are_text_fold_and_arrows_never_break(fresh):
    """A docstring's every line is a string, not code ("cache with it" has no
    keyword in it); a docstring of several lines folds, one at a time or all
    at once; at a narrow width no `->` is cut across two lines."""
    page, _, _ = fresh(window(NARROW))
    docs = page.eval_on_selector_all(
        "details.doc",
        """ds => ds.map(d => [...d.querySelectorAll('.src')].map(s =>
            [...s.querySelectorAll('span')].filter(t => t.textContent.trim())
                .map(t => t.className)))""",
    )
    assert len(docs) > 30
    for lines in docs:
        assert len(lines) > 1
        # a string's own classes, and the no-wrap box of a "->" inside one
        assert all(
            css.startswith("sd") or css == "arrow" for line in lines for css in line
        )
    arrows = page.eval_on_selector_all(
        ".cell:not([style*='none']) .arrow",
        "as => as.filter(a => a.offsetParent).map(a => a.getClientRects().length)",
    )
    assert arrows and set(arrows) == {1}
    page.click("label[for=show-numpy]")

    def shown_doc_lines():
        return page.evaluate(
            """[...document.querySelectorAll('.numpy details.doc > .line')]
                .filter(l => getComputedStyle(l).display !== 'none').length"""
        )

    assert shown_doc_lines() > 0
    page.check("#fold-docs")
    assert shown_doc_lines() == 0
    first = page.locator(".numpy details.doc").first
    page.uncheck("#fold-docs")
    first.locator("summary").click()
    assert first.evaluate("d => d.open") is False
