"""What a user's screen shows: the verdict last, under tox (stdout and
stderr two terminals, relayed separately) as in a terminal, and every line at
80 columns whole or wrapped between words (docs/run.md, "On a terminal").
Each command is given --backends numpy: the same screens in every env, run
once, in the numpy env (a test_numpy_ file)."""

from __future__ import annotations

import re

import pytest
from terminal import one_terminal, screen, two_terminals

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


def fits(shown: list[str], width: int = 80) -> None:
    """Every line on the screen fits `width` (a longer one the terminal
    would break wherever it reaches the edge, inside a word), but a line of
    one word wider than it (a long path, a file:// URI), which no wrapping
    between words can break."""
    wide = [line for line in shown if len(line) > width and " " in line.strip()]
    assert not wide, "\n".join(wide)


def test_train_on_a_terminal_says_what_runs_first_and_fits_80_columns(tmp_path):
    argv = ["train", "--quick", "--steps", "3", "--backends", "numpy"]
    written = one_terminal([*argv, "--output-dir", "outputs/train"], tmp_path)
    shown = [line for line in screen(written) if line]
    fits(shown)
    assert shown[0].startswith("triptych train: V=64, T=32, C=64")  # the header first
    plain = CONTROL.sub(b"", written).decode()
    assert plain.index("training") < plain.index("drawing the figures")
    wrote = next(i for i, line in enumerate(shown) if line.startswith("wrote "))
    assert shown[wrote - 1].startswith("PASS: ")
    assert " ".join(line.strip() for line in shown[wrote:]).startswith(
        "wrote outputs/train/results.json, outputs/train/steps.csv, "
    )  # wrapped between the names


def test_a_progress_line_elides_its_note_never_its_task():
    """train's progress line: 'training' and 'compiling torch-compile's step'
    whole at 80 columns; what they are about (the trainers, the compiler) in a
    note that gives way, after the bar: at 80 columns the bar is narrower and
    the note whole; at 40 the bar is gone and the note elided."""
    import io

    from rich.console import Console

    from triptych.common import status
    from triptych.train import loop

    progress = status.progress(quiet=True)  # drawn below, not live
    names = "numpy, torch-compile, jax-jit, flax-jit"
    progress.update(progress.add_task("training", total=350, note=names), completed=9)
    text, note = loop.first_step("torch-compile")
    progress.add_task(text, total=350, note=note)
    for width in (80, 40):
        console = Console(file=io.StringIO(), width=width, force_terminal=True)
        console.print(progress.make_tasks_table(progress.tasks))
        first, second = (
            CONTROL.sub(b"", console.file.getvalue().encode()).decode().splitlines()
        )
        assert max(len(first), len(second)) <= width
        assert " compiling torch-compile's step" in second
        if width == 80:
            assert re.search(rf" training \({names}\) +━", first)  # a narrower bar
        else:
            assert " training (" in first and "…" in first and "━" not in first


class Terminal:
    """A stream that says it is a terminal, and keeps what is written."""

    def __init__(self):
        import io

        self.buffer = io.StringIO()

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        return self.buffer.write(text)

    def flush(self) -> None:
        pass


COMMANDS = ["run", "lab", "read", "grad", "train", "bench", "check", "shard"]


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_every_help_fits_80_columns(command, capsys, monkeypatch):
    from triptych.cli import main

    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"] if command else ["--help"])
    assert exit_.value.code == 0
    fits(capsys.readouterr().out.splitlines())


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--dtype", "float8"],  # argparse's own: (choose from 'float16', ...)
        ["bench", "--modes", "numpy,not-a-mode"],
        ["train", "--backends", "numpy", "--threads", "999"],  # a CommandError
    ],
    ids=lambda argv: argv[0],
)
def test_an_error_on_a_terminal_wraps_between_words(argv, monkeypatch):
    """Piped, an error is one line (the other tests); on an 80-column
    terminal, the same words wrapped between them."""
    from triptych.cli import main

    monkeypatch.setenv("COLUMNS", "80")
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    assert code == 2
    lines = terminal.buffer.getvalue().splitlines()
    assert len(lines) > 1, lines  # each of these is longer than 80 columns
    fits(lines)
    assert lines[0].startswith(f"triptych {argv[0]}: error: ")
    assert all(line.startswith("  ") for line in lines[1:])


@pytest.mark.parametrize("command", ["train", "bench", "run"])
def test_an_unwritable_output_dir_is_refused_before_any_framework_loads(
    command, tmp_path
):
    """As fast as the other refusals: no torch or JAX imported first."""
    import subprocess
    import sys

    from terminal import ROOT

    a_file = tmp_path / "a-file"
    a_file.write_text("")
    code = (
        "import sys; from triptych.cli import main; "
        f"code = main([{command!r}, '--output-dir', {str(a_file / 'out')!r}]); "
        "print(code, sorted({'torch', 'jax'} & set(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT
    )
    assert done.stdout.split("\n")[-2] == "2 []", done.stdout + done.stderr
    assert done.stderr.startswith(f"triptych {command}: error: cannot write to ")


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "impl_numpy:multi_head_attention", "--grade", "--examples", "1",
         "--output-dir", "outputs/check"],
        ["read", "--backends", "numpy", "--output-dir", "outputs/read"],
        ["grad", "--backends", "numpy"],
        ["run", "--backends", "numpy", "--output-dir", "outputs/run"],
        ["shard", "--backends", "numpy", "--T", "64", "--output-dir", "outputs/shard"],
    ],
    ids=lambda argv: argv[0],
)  # fmt: skip
def test_every_line_on_an_80_column_terminal_fits(argv, tmp_path):
    """Tables fitted, prose and 'wrote' lines wrapped between words: nothing
    for the terminal to break inside a word."""
    written = one_terminal(argv, tmp_path)
    shown = [line for line in screen(written) if line]
    fits(shown)
    assert any(line.startswith("wrote ") for line in shown) or argv[0] == "grad"


def test_a_target_that_cannot_import_is_its_words_at_full_width(tmp_path):
    """No property ran: no empty table whose caption squeezes the message into
    a third of the screen, but the target's name and why, wrapped between
    words at 80 columns."""
    (tmp_path / "broken.py").write_text("def attention(x, w_q, w_k, w_v:\n")
    argv = ["check", "broken.py:attention", "--output-dir", "outputs/check"]
    shown = [line for line in screen(one_terminal(argv, tmp_path)) if line]
    fits(shown)
    assert not any("details" in line for line in shown), shown  # no table header
    text = " ".join(shown)
    assert "SyntaxError" in text and "was never closed" in text, shown
    assert max(map(len, shown)) > 60, shown  # the width used, not a third of it
