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


def one_terminal(argv: list[str], cwd: Path, columns: int = 80) -> bytes:
    """What `python -m triptych ARGV` writes on a terminal, stdout and stderr
    both (as a user runs it), read until it ends."""
    return two_terminals(argv, cwd, columns, same=True)[0]


def two_terminals(
    argv: list[str], cwd: Path, columns: int = 80, same: bool = False
) -> tuple[bytes, bytes]:
    """What `python -m triptych ARGV` writes on stdout and on stderr when each
    is a pseudo-terminal of its own, as tox runs a command (the two relayed to
    one screen separately, in no order between them); read until it ends.
    `same`: one terminal for both, all of it in the first."""
    out_master, out_slave = pty.openpty()
    err_master, err_slave = pty.openpty()
    if same:
        os.close(err_slave)
        err_slave = out_slave
    process = subprocess.Popen(
        [sys.executable, "-m", "triptych", *argv],
        stdin=subprocess.DEVNULL,
        stdout=out_slave,
        stderr=err_slave,
        cwd=cwd,
        env={
            **os.environ,
            "COLUMNS": str(columns),
            "TERM": "xterm",
            "PYTHONPATH": str(ROOT),
            "TMPDIR": str(cwd),
        },
    )
    os.close(out_slave)
    if not same:
        os.close(err_slave)
    seen = {out_master: b"", err_master: b""}
    open_ = [out_master, err_master]
    give_up = time.monotonic() + 300  # not a timing assertion: a hang's guard
    try:
        while open_ and time.monotonic() < give_up:
            ready, _, _ = select.select(open_, [], [], 1.0)
            for fd in ready:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:  # the terminal closed: the process ended
                    chunk = b""
                if chunk:
                    seen[fd] += chunk
                else:
                    open_.remove(fd)
    finally:
        process.kill()
        process.wait()
        os.close(out_master)
        os.close(err_master)
    return seen[out_master], seen[err_master]


def screen(written: bytes) -> list[str]:
    """The lines a terminal shows after `written`: text, CR, LF, and the
    escape sequences a status line uses (cursor up, erase in line); the
    others (colours, the cursor hidden) change nothing here."""
    lines, row, col = [""], 0, 0
    for token in re.finditer(
        rb"\x1b\[([0-9;?]*)([a-zA-Z])|\r\n|\n|\r|[^\x1b\r\n]+", written
    ):
        text = token[0]
        if token[2] == b"A":  # cursor up
            row = max(0, row - int(token[1] or 1))
        elif token[2] == b"K":  # erase in line (2: all of it, else from the cursor)
            lines[row] = "" if token[1] == b"2" else lines[row][:col]
        elif token[2] is not None:
            continue
        elif text in (b"\n", b"\r\n"):
            row, col = row + 1, 0
            if row == len(lines):
                lines.append("")
        elif text == b"\r":
            col = 0
        else:
            s = text.decode(errors="replace")
            line = lines[row].ljust(col)
            lines[row] = line[:col] + s + line[col + len(s) :]
            col += len(s)
    return [line.rstrip() for line in lines]
