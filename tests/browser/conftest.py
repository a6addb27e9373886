"""The browser tests' fixtures: the page, built once per session into a
temporary directory, headless Chromium (Debian's `chromium`, launched by
path; env CHROMIUM another) driven by Playwright, and the page loaded once
per window for the tests that only read it."""

from __future__ import annotations

import os
import shutil
from typing import Any, NamedTuple

import pytest

from triptych.cli import main

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture(scope="session")
def page_path(tmp_path_factory):
    out = tmp_path_factory.mktemp("read")
    assert main(["read", "--output-dir", str(out)]) == 0
    return out / "index.html"


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--no-first-run",
            ],
        )
        yield browser
        browser.close()


class Loaded(NamedTuple):
    """A page with the file loaded, and what it asked for and reported."""

    page: Any
    requests: list[str]  # every URL it requested, from the first
    errors: list[str]  # its console's errors and uncaught exceptions


def load(browser, page_path, viewport, media="screen") -> Loaded:
    """A new page of `viewport` ({"width", "height"}) in `media` ("screen" or
    "print"), with the file `page_path` loaded."""
    page = browser.new_page(viewport=viewport)
    requests, errors = [], []
    page.on("request", lambda request: requests.append(request.url))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.emulate_media(media=media)
    page.goto(page_path.as_uri())
    page.wait_for_load_state("load")
    return Loaded(page, requests, errors)


@pytest.fixture(scope="module")
def loaded(browser, page_path):
    """loaded(viewport, media="screen"): the page in that window, loaded once
    for every test of the file that only reads it (Chromium lays the whole
    page out in about 1.4 s a load) and scrolled back to the top; closed with
    the file. A test that clicks, types or follows a link loads its own
    (`fresh`)."""
    pages: dict[tuple, Loaded] = {}

    def get(viewport, media="screen") -> Loaded:
        key = (viewport["width"], viewport["height"], media)
        if key not in pages:
            pages[key] = load(browser, page_path, viewport, media)
        pages[key].page.evaluate("window.scrollTo(0, 0)")
        return pages[key]

    yield get
    for found in pages.values():
        found.page.close()


@pytest.fixture
def fresh(browser, page_path):
    """fresh(viewport, media="screen", path=the page): a page of the test's
    own, loaded as `loaded` loads one, closed when the test ends."""
    opened: list[Loaded] = []

    def get(viewport, media="screen", path=page_path) -> Loaded:
        opened.append(load(browser, path, viewport, media))
        return opened[-1]

    yield get
    for found in opened:
        found.page.close()
