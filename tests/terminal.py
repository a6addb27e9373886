"""Running `triptych` with its stderr on a pseudo-terminal, as a user's
terminal is: what tests/test_status.py and tests/test_shard_cli.py read the
status lines from."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def terminal_stderr(argv: list[str], until: re.Pattern, cwd: Path) -> bytes:
    """What `python -m triptych ARGV` writes on a terminal's stderr, read until
    `until` matches (or the process ends); then the process is killed. Its
    temporary folders go into `cwd` (TMPDIR), which pytest removes: a killed
    `triptych shard` cannot remove its own."""
    master, slave = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-X", "importtime", "-m", "triptych", *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=slave,
        cwd=cwd,
        env={
            **os.environ,
            "COLUMNS": "100",
            "TERM": "xterm",
            "PYTHONPATH": str(ROOT),
            "TMPDIR": str(cwd),
        },
    )
    os.close(slave)
    seen = b""
    give_up = time.monotonic() + 300  # not a timing assertion: a hang's guard
    try:
        while not until.search(seen) and time.monotonic() < give_up:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the terminal closed: the process ended
                break
            if not chunk:
                break
            seen += chunk
    finally:
        process.kill()
        process.wait()
        os.close(master)
    return seen
