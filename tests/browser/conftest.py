"""The browser tests' fixtures: the page, built once per session into a
temporary directory, and headless Chromium (Debian's `chromium`, launched by
path; env CHROMIUM another) driven by Playwright."""

from __future__ import annotations

import os
import shutil

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
