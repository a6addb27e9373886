"""Something on screen at once: every command names what it does on a
terminal's stderr before its heavy work starts (triptych.common.status), and
names the compiler while one works.

A command runs in a subprocess whose stderr is a pseudo-terminal, under
`python -X importtime`, which writes a line to the same stderr as each module
finishes importing. The status line must come before the line of the first
backend's import: an order in one stream, not a time. The process is stopped
once the backends are imported, so each test costs their import only. Piped,
stderr gets no status at all (the other tests' one-line errors stay one line).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from terminal import terminal_stderr

from triptych.bench import sweep
from triptych.bench.modes import MODES
from triptych.cli import main
from triptych.train import loop

pytestmark = pytest.mark.every_backend

ROOT = Path(__file__).resolve().parents[1]
IMPORTED = re.compile(rb"\| +(impl_\w+)[.\w]*\r?\n")  # -X importtime: a module
# of a backend imported (the first, impl_<name>.arrays, holds its framework's)


def imported(name: str) -> re.Pattern:
    """-X importtime's line for the first module of impl_<name>."""
    return re.compile(rb"\| +impl_" + name.encode() + rb"[.\w]*\r?\n")


def first_status_then_imports(seen: bytes, status: str) -> None:
    """`status` is on stderr, before any backend's import finished."""
    at = seen.find(status.encode())
    assert at >= 0, f"no status {status!r} in:\n{seen.decode(errors='replace')}"
    first_import = IMPORTED.search(seen)
    assert first_import is not None, "no backend was imported"
    assert at < first_import.start(), f"{status!r} after {first_import[1]!r}"


@pytest.fixture
def selected(request) -> list[str]:
    return list(request.config.selected_backends)


@pytest.mark.parametrize(
    "command",
    [
        ["run", "--output-dir", "out"],
        ["grad", "--dtypes", "float32"],
        ["read", "--output-dir", "out"],
        ["train", "--steps", "1", "--output-dir", "out"],
    ],
    ids=lambda argv: argv[0],
)
def test_a_command_names_its_loading_before_the_imports(command, selected, tmp_path):
    names = ",".join(selected)
    seen = terminal_stderr(
        [*command, "--backends", names], imported(selected[-1]), tmp_path
    )
    if command[0] == "train":  # NumPy, the reference, always trains
        names = ",".join(dict.fromkeys(["numpy", *selected]))
    first_status_then_imports(seen, f"loading {names.replace(',', ', ')}")


def test_bench_names_its_loading_before_the_imports(selected, tmp_path):
    modes = ",".join(
        n for n in ("numpy", "torch-eager", "jax-jit") if MODES[n].framework in selected
    )
    argv = ["bench", "--quick", "--modes", modes, "--output-dir", "out"]
    seen = terminal_stderr(argv, imported(selected[-1]), tmp_path)
    first_status_then_imports(seen, f"loading {', '.join(selected)}")


def test_lab_names_its_loading_before_the_imports(selected, tmp_path):
    seen = terminal_stderr(["lab"], imported(selected[-1]), tmp_path)
    first_status_then_imports(seen, "loading numpy, torch, jax")


def test_piped_stderr_gets_no_status(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "triptych", "grad", "--backends", "numpy", "--dtypes", "float32"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0
    assert done.stderr == ""
    assert done.stdout.startswith("gradients of L = sum(out * d_out)")


def test_a_compilers_work_is_named():
    """The progress line of a compiled mode or trainer names the compiler
    that works in its first call or step."""
    assert sweep.building(MODES["torch-compile"]) == (
        "torch.compile compiles its first call"
    )
    assert sweep.building(MODES["jax-jit"]) == "jax.jit compiles its first call"
    assert sweep.building(MODES["flax-jit"]) == "nnx.jit compiles its first call"
    assert sweep.building(MODES["numpy"]) is None
    assert loop.first_step("torch-compile") == (
        "compiling torch-compile's step",
        "step 1, torch.compile",
    )
    assert loop.first_step("jax-jit") == ("compiling jax-jit's step", "step 1, jax.jit")
    assert loop.first_step("flax-jit") == (
        "compiling flax-jit's step",
        "step 1, nnx.jit",
    )
    assert loop.first_step("numpy") == ("step 1: numpy", None)


def test_train_says_each_step_that_takes_long_before_it_starts():
    from shared.train import TrainConfig, make_task

    task = make_task(TrainConfig(vocab=16, seq_len=8, d_model=8, n_heads=2, n_layers=1, batch=2, steps=2))  # fmt: skip
    said: list[str] = []
    loop.train(
        task, ["numpy"], "float64", [], doing=lambda text, note=None: said.append(text)
    )
    assert said == [
        "building the trainers",
        "evaluating numpy before training",
        "step 1: numpy",
        "training",  # the note, "numpy", may give way on a narrow line
        "evaluating after training",
    ]


def test_check_names_each_target_as_it_starts(capsys, tmp_path):
    """A target that hangs is named from its start: piped, a line as it
    starts (and as it ends); on a terminal, the progress line."""
    argv = ["check", "impl_numpy:multi_head_attention", "--properties", "causality"]
    argv += ["--examples", "1", "--output-dir", str(tmp_path)]
    assert main(argv) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "checking impl_numpy:multi_head_attention"


def progress_lines(width: int, *tasks) -> list[str]:
    """The progress lines of `tasks` (description, total, completed, note) as
    a terminal `width` columns wide shows them, without the colours."""
    import io

    from rich.console import Console

    from triptych.common import status

    progress = status.progress(quiet=True)  # drawn below, not live
    for description, total, completed, note in tasks:
        task = progress.add_task(description, total=total, note=note)
        progress.update(task, completed=completed)
    console = Console(file=io.StringIO(), width=width, force_terminal=True)
    console.print(progress.make_tasks_table(progress.tasks))
    return [
        line.rstrip()
        for line in re.sub(
            r"\x1b\[[0-9;?]*[a-zA-Z]", "", console.file.getvalue()
        ).splitlines()
    ]


CHECKING = "checking some/long/path/to/file.py:attention"


def test_the_bar_gives_way_before_a_word_of_the_task():
    """At 80 columns a long task is whole and the bar narrower; where the
    task needs the bar's columns the bar goes, the count and clock stay."""
    (line,) = progress_lines(80, (CHECKING, 12, 2, None))
    assert line.startswith(f"⠋ {CHECKING} ━") and line.endswith(" 2/12 0:00:00")
    bar = line[len(f"⠋ {CHECKING} ") : -len(" 2/12 0:00:00")]
    assert 6 <= len(bar.strip()) < 20 and len(line) == 80  # narrower than 20
    path = "/tmp/nu_impls/a_nanogpt.py:CausalSelfAttention: oracle:float16"
    first, second = progress_lines(80, (path, 12, 2, None), ("training", 350, 9, None))
    assert re.fullmatch(rf"⠋ {path} +2/12 0:00:00", first)  # no bar: the task whole
    assert second.startswith("⠋ training ") and second.endswith(" 9/350 0:00:00")


def test_at_40_columns_the_bar_then_the_notes_count_and_clock_give_way():
    """The order things give way in: the bar, the note, the count, the
    clock; only then is the task itself elided (its middle)."""
    note = "numpy, torch-compile, jax-jit, flax-jit"
    (line,) = progress_lines(40, ("training", 350, 9, note))
    assert line.startswith("⠋ training (num") and "…" in line  # the note elided
    assert line.endswith(" 9/350 0:00:00") and len(line) <= 40
    task = "checking tests/f.py:attention"  # 29 columns: no count, a clock
    assert progress_lines(40, (task, 12, 2, note)) == [f"⠋ {task} 0:00:00"]
    task = "checking tests/impls/file.py:attention"  # 38: nothing but the task
    assert progress_lines(40, (task, 12, 2, note)) == [f"⠋ {task}"]
    (line,) = progress_lines(40, (CHECKING, 12, 2, note))
    assert line == "⠋ checking som…path/to/file.py:attention"  # last: its middle
    from triptych.common import status

    assert status.elided(CHECKING, 20) == "checki….py:attention"  # a third


def test_a_note_gives_way_before_the_name():
    """The bench's progress line: 'T=… mode' whole, its note elided first,
    then left out; only then the name itself."""
    from triptych.common import status

    name, note = "T=8192 jax-tuned-jit", "jax.jit compiles its first call"
    assert status.with_note(name, note, 80) == f"{name} ({note})"
    assert (
        status.with_note(name, note, 40) == "T=8192 jax-tuned-jit (jax.j… first call)"
    )
    assert status.with_note(name, note, 28) == name  # 5 columns for the note: none
    assert status.with_note(name, None, 12) == status.elided(name, 12)
    assert status.with_note(name, note, 12) == status.elided(name, 12)


def test_checks_progress_line_names_a_target_by_its_file_and_object():
    from triptych.check.progress import progress_name

    spec = "/tmp/nu_impls/a_nanogpt.py:CausalSelfAttention"
    assert progress_name(spec) == "a_nanogpt.py:CausalSelfAttention"
    assert progress_name("impl_numpy:multi_head_attention") == (
        "impl_numpy:multi_head_attention"
    )


def test_a_target_that_cannot_be_loaded_is_its_one_error_line(capsys, tmp_path):
    """Piped, a target whose file does not exist is refused before any target
    runs: its error alone on stderr (no 'checking'/'checked' around it: those
    name one that hangs), nothing on stdout (docs/commands.md)."""
    argv = ["check", f"{tmp_path}/missing.py:f", "--output-dir", str(tmp_path)]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        f"triptych check: error: {tmp_path}/missing.py: no such file"
    ]
    assert captured.out == ""
