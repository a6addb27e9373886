"""`triptych read --pdf`: the page printed to a PDF handout by Chromium's own
print to PDF (headless), in the page's print style: A4 landscape, the three
columns side by side, equations whole, heatmaps on the page."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from triptych.common.errors import CommandError

HANDOUT = "handout.pdf"
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
"""The names a Chromium goes by on a PATH (env CHROMIUM: a path instead)."""


def chromium() -> str:
    """The Chromium to print with, or a one-line error before anything runs."""
    found = os.environ.get("CHROMIUM") or next(
        (path for name in BROWSERS if (path := shutil.which(name))), None
    )
    if not found or not Path(found).exists():
        raise CommandError(
            "--pdf prints with Chromium, and none was found: install chromium "
            "or set CHROMIUM to its path"
        )
    return found


def print_pdf(browser: str, page: Path) -> tuple[Path, int]:
    """Print `page` to handout.pdf beside it; the path and its page count."""
    out = page.with_name(HANDOUT)
    part = page.with_name(HANDOUT + ".part")
    sandbox = ["--no-sandbox"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
    command = [
        browser,
        "--headless",
        "--disable-gpu",
        *sandbox,
        "--no-pdf-header-footer",
        f"--print-to-pdf={part}",
        page.resolve().as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if done.returncode != 0 or not part.exists():
        part.unlink(missing_ok=True)
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise CommandError(f"Chromium could not print the page: {last}")
    os.replace(part, out)
    return out, pages(out)


def pages(pdf: Path) -> int:
    """How many pages the PDF has: its /Type /Page objects."""
    return len(re.findall(rb"/Type\s*/Page(?![a-zA-Z])", pdf.read_bytes()))
