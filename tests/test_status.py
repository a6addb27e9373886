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


@pytest.mark.parametrize("width", [80, 40])
def test_a_long_description_gives_way_and_the_count_and_clock_stay_whole(width):
    """On a narrow terminal the progress line elides its description's
    middle; the count ('2/12') and the time ('0:00:00') are never cut."""
    import io

    from rich.console import Console

    from triptych.common import status

    progress = status.progress(quiet=True)  # drawn below, not live
    path = "/tmp/nu_impls/a_nanogpt.py:CausalSelfAttention: oracle:float16"
    progress.advance(progress.add_task(path, total=12), 2)
    jax = "jax on 1, 2, 4 devices: one child process, jax.jit compiling"
    progress.advance(progress.add_task(jax, total=9), 6)
    console = Console(file=io.StringIO(), width=width, force_terminal=True)
    console.print(progress.make_tasks_table(progress.tasks))
    first, second = re.sub(
        r"\x1b\[[0-9;?]*[a-zA-Z]", "", console.file.getvalue()
    ).splitlines()
    assert first.endswith(" 2/12 0:00:00") and second.endswith(" 6/9   0:00:00")
    assert "…" in first and ":float16 " in first  # the end: what runs now
    assert max(len(first), len(second)) <= width
    assert status.elided(path, 20) == "/tmp/n…racle:float16"  # a third, two thirds


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
