"""The impl_* copies of a file stay parallel: tools/check_parallel.py on the
repository, and on planted copies whose drift it must find
(docs/architecture.md, "Parallel files"). tox -e lint runs the tool too."""

from __future__ import annotations

import functools
import importlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# once, in the jax env; and mutmut's runs leave it out: it reads the source
# files, which mutmut rewrites (docs/suite.md, docs/mutation.md)
pytestmark = [pytest.mark.neutral, pytest.mark.reads_source]

STEPPED = ("lesson.py", "attention.py", "blockwise.py", "kv_cache.py", "sharded.py")
"""The files with step comments (and kernel.py, torch's and JAX's only)."""
STEP = re.compile(r"\s*# (\w+ )?[1-7]\. ")  # `# 3. ...`, `# ring 2. ...`


@functools.cache
def tool():
    """tools/check_parallel.py, imported when a test runs (collected without
    tools/, as in mutmut's copy, this file still imports)."""
    sys.path.insert(0, str(ROOT / "tools"))  # where it imports its rules from
    return importlib.import_module("check_parallel")


def differences(root: Path = ROOT, *names: str) -> list[str]:
    names = names or tuple(tool().file_names(root))
    return [m for name in names for m in tool().check(root, name)]


def test_the_impl_copies_are_parallel():
    assert tool().main([]) == 0


def test_the_tool_runs_alone_as_tox_e_lint_runs_it():
    done = subprocess.run(
        [sys.executable, "tools/check_parallel.py", "lesson.py", "--list"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "lesson.py: numpy torch jax, line by line\n"


def plant(tmp_path: Path, *names: str) -> Path:
    """A repository of the impl_* copies of `names` alone."""
    for name in names:
        for copy in ROOT.glob(f"impl_*/{name}"):
            (tmp_path / copy.parent.name).mkdir(exist_ok=True)
            shutil.copy(copy, tmp_path / copy.parent.name / name)
    return tmp_path


def edit(path: Path, line: int, new: str) -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines[line - 1] = new
    path.write_text("".join(lines))


def test_a_planted_comment_drift_fails_with_its_line(tmp_path, capsys):
    root = plant(tmp_path, "lesson.py", "variants.py")
    lesson = root / "impl_jax" / "lesson.py"
    line = lesson.read_text().splitlines().index("    # 4. scale by 1 / sqrt(D)") + 1
    edit(lesson, line, "    # 4. scale by sqrt(D)\n")
    assert tool().main(["--root", str(root)]) == 1
    out = capsys.readouterr().out
    assert f"impl_numpy/lesson.py:{line} differs from impl_jax/lesson.py:{line}" in out
    assert f"numpy {line}: # 4. scale by 1 / sqrt(D)\n" in out
    assert f"jax {line}: # 4. scale by sqrt(D)\n" in out
    assert out.endswith("1 difference(s) in 2 parallel files\n")


@pytest.mark.parametrize(
    "name, framework",
    [
        *[(name, framework) for name in STEPPED for framework in ("torch", "jax")],
        ("kernel.py", "jax"),
    ],
)
def test_every_step_comment_is_compared(tmp_path, name, framework):
    """What tests/test_reading_path.py asserted of these files: their step
    comments (`# 3. ...`, `# ring 2. ...`) word for word and in order in
    every copy. Each one changed is found."""
    root = plant(tmp_path, name)
    path, before = root / f"impl_{framework}" / name, differences(root, name)
    text = path.read_text()
    steps = [n for n, line in enumerate(text.splitlines(), 1) if STEP.match(line)]
    assert len(steps) >= 2  # kv_cache.py's two cache stages; the others more
    path.write_text(re.sub(r"(?m)^(\s*# (\w+ )?[1-7]\.) ", r"\1 (planted) ", text))
    found = "\n".join(set(differences(root, name)) - set(before))
    assert [n for n in steps if f" {framework} {n}: # " in found] == steps


def test_idioms_are_no_difference_and_the_rest_is(tmp_path):
    numpy = "y = np.swapaxes(x, -1, -2).max(axis=-1, keepdims=True)  # (..., T)\n"
    torch = (
        "y = torch.swapaxes(\n    x, -1, -2\n).amax(dim=-1, keepdim=True)  # (..., T)\n"
    )
    for framework, text in (("numpy", numpy), ("torch", torch), ("jax", numpy)):
        (tmp_path / f"impl_{framework}").mkdir()
        (tmp_path / f"impl_{framework}" / "planted.py").write_text(text)
    assert differences(tmp_path) == []
    edit(tmp_path / "impl_jax" / "planted.py", 1, numpy.replace("-1,", "-2,", 1))
    (found,) = differences(tmp_path)
    assert found.startswith(
        "impl_numpy/planted.py:1 differs from impl_jax/planted.py:1"
    )


def test_a_declared_line_that_changes_is_compared_again(tmp_path):
    root = plant(tmp_path, "kv_cache.py")
    path = root / "impl_jax" / "kv_cache.py"
    written = "        k_cache = cache.k.at[..., slot, :].set(k[..., 0, :])"
    written += "  # (..., H_kv, L, D)\n"
    line = path.read_text().splitlines(keepends=True).index(written) + 1
    edit(path, line, written.replace("slot", "slot + 1"))
    found = differences(root)
    assert f"impl_jax/kv_cache.py:{line}" in found[0]
    declared = "k_cache = cache.k.at[..., slot, :].set(k[..., 0, :]) ..."
    assert found[1:] == ["impl_jax/kv_cache.py: declared, found nowhere: " + declared]


def test_a_renamed_definition_fails_a_file_compared_in_outline(tmp_path):
    root = plant(tmp_path, "module.py")
    path = root / "impl_torch" / "module.py"
    path.write_text(path.read_text().replace("def init_cache(", "def new_cache("))
    (found,) = differences(root)
    assert "impl_torch/module.py" in found
    assert "def new_cache(" in found
