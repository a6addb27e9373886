"""What a user's screen shows: the verdict last, under tox (stdout and
stderr two terminals, relayed separately) as in a terminal, and every line at
80 columns whole or wrapped between words (docs/run.md, "On a terminal")."""

from __future__ import annotations

import re

import pytest
from terminal import screen, two_terminals

CONTROL = re.compile(rb"\x1b\[[0-9;?]*[a-zA-Z]")
MOVES = re.compile(rb"\x1b\[[0-9]*[AK]")  # cursor up, erase in line


def test_under_tox_the_verdict_is_the_last_thing_on_the_screen(tmp_path):
    """stdout and stderr on two pseudo-terminals: the status is drawn on
    stdout, the report's stream, and erased before the report; stderr gets
    no cursor movement that could land after the verdict."""
    argv = ["run", "--backends", "numpy", "--output-dir", "out"]
    out, err = two_terminals(argv, tmp_path)
    assert not MOVES.search(err), err
    shown = [line for line in screen(out) if line]
    verdict = next(i for i, line in enumerate(shown) if line.startswith("PASS: "))
    assert " ".join(line.strip() for line in shown[verdict:]) == (
        "PASS: numpy agrees with the float64 oracle in float32 "
        "(5 of 5 comparisons within the tolerance)"
    )  # whole, and last
    assert shown[0].startswith("triptych run: preset trained")  # no stale status
    assert "loading" in CONTROL.sub(b"", out).decode()  # the status was shown


@pytest.mark.parametrize("same", [True, False])
def test_the_status_goes_where_its_erase_keeps_order(monkeypatch, same, tmp_path):
    import os
    import sys

    from triptych.common import status

    terminals = [os.openpty(), os.openpty()]
    out_slave = terminals[0][1]
    err_slave = out_slave if same else terminals[1][1]
    try:
        with (
            open(out_slave, "w", closefd=False) as out,
            open(err_slave, "w", closefd=False) as err,
        ):
            monkeypatch.setattr(sys, "stdout", out)
            monkeypatch.setattr(sys, "stderr", err)
            assert status.status_stream() is (err if same else out)
        with (
            open(tmp_path / "log", "w") as out,
            open(err_slave, "w", closefd=False) as err,
        ):
            monkeypatch.setattr(sys, "stdout", out)
            monkeypatch.setattr(sys, "stderr", err)
            assert status.status_stream() is err  # stdout to a file: stderr's own
    finally:
        for fd in (fd for pair in terminals for fd in pair):
            os.close(fd)
