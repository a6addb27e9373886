"""The registry of backends (shared/registry.py) and their hooks
(impl_*/backend.py): what it holds agrees with what the library does, the
hook files are parallel, the tooling branches on no framework's name, and a
backend registered by the tests alone shows up wherever the tooling lists
backends, with no file of triptych edited (docs/architecture.md, "Adding a
backend")."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from shared import registry, validation
from shared.registry import Arrays, Framework, Install
from shared.validation.arrays import check_frameworks
from triptych.cli import build_parser, main
from triptych.common import backends

pytestmark = pytest.mark.neutral  # once, in the jax env (docs/suite.md)

ROOT = Path(__file__).resolve().parents[1]
BUILT_IN = ("numpy", "torch", "jax")
NAMES = {"numpy", "torch", "jax", "flax"}


def test_the_built_in_backends_in_order():
    assert registry.names() == BUILT_IN
    assert registry.reference().name == "numpy"
    assert [registry.get(n).package for n in BUILT_IN] == [
        f"impl_{n}" for n in BUILT_IN
    ]
    with pytest.raises(ValueError, match="unknown backend 'mlx'; choose from numpy, "):
        registry.get("mlx")
    with pytest.raises(ValueError, match="registered already"):
        registry.register(registry.get("jax"))
    with pytest.raises(ValueError, match="built in"):
        registry.unregister("torch")


def test_validation_reads_the_registry():
    """The framework check names each framework's arrays and converter as the
    registry says them."""
    assert registry.framework_of(np.ones(2)) == validation.framework_of(np.ones(2))
    assert registry.framework_of([1.0]) is None
    for host in BUILT_IN:
        for have in BUILT_IN:
            stand_in = type("Array", (), {"__module__": have})()
            if have in (host, *registry.get(host).arrays.computes_on):
                check_frameworks(host, x=stand_in)  # its own arrays pass
                continue
            with pytest.raises(TypeError) as raised:
                check_frameworks(host, x=stand_in)
            assert registry.conversion("x", have, host) in str(raised.value)


def test_every_backend_py_defines_the_hooks_in_the_same_order():
    """Read with ast, so that it holds where torch or JAX is not installed."""
    for name in BUILT_IN:
        tree = ast.parse((ROOT / f"impl_{name}" / "backend.py").read_text())
        defined = []
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                defined.append(node.name)
            elif isinstance(node, ast.Assign):
                defined += [t.id for t in node.targets if isinstance(t, ast.Name)]
        public = [d for d in defined if not d.startswith("_")]
        assert public == list(backends.HOOKS), name


def branches_on_a_name(path: Path) -> list[int]:
    """The lines of `path` that compare a value with a framework's name:
    x == "jax", x in ("torch", "jax")."""

    def is_name(node) -> bool:
        return isinstance(node, ast.Constant) and node.value in NAMES

    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            listed = [
                e
                for s in node.comparators
                if isinstance(s, ast.Tuple | ast.List | ast.Set)
                for e in s.elts
            ]
            if any(is_name(s) for s in (*sides, *listed)):
                found.append(node.lineno)
    return found


def test_the_tooling_asks_the_registry_not_a_name():
    found = {
        path.relative_to(ROOT).as_posix(): lines
        for folder in ("shared", "triptych", "tools", "exercises")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if (lines := branches_on_a_name(path))
    }
    assert not found


# A backend of the tests' own ------------------------------------------------


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A backend "fake": impl_fake, NumPy's functions and hooks under another
    name, registered for the test and gone after it."""
    package = tmp_path / "impl_fake"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from impl_numpy import *  # noqa: F403\nfrom impl_numpy import __all__\n"
    )
    (package / "backend.py").write_text("from impl_numpy.backend import *  # noqa\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    framework = Framework(
        name="fake",
        title="Fake",
        arrays=Arrays("a fake array", ("impl_fake",)),
        install=Install("fake", ("numpy",), (), ("numpy",)),
        color="tab:purple",
    )
    registry.register(framework)
    yield framework
    registry.unregister("fake")
    for name in ("impl_fake", "impl_fake.backend"):
        sys.modules.pop(name, None)


def test_a_registered_backend_is_one_of_the_backends(fake):
    assert registry.names() == (*BUILT_IN, "fake")
    assert backends.parse_backends("numpy, fake") == ("numpy", "fake")
    assert "fake" in backends.installed_backends()
    assert backends.load_backend("fake").multi_head_attention
    assert backends.hooks("fake").gemm
    assert backends.not_installed_line(["fake"]) == (
        'not installed, so not run: fake (pip install -c constraints.txt -e ".[fake]")'
    )
    assert backends.version_line("fake", {"numpy": "2.0"}) == "numpy 2.0"


def test_a_registered_backend_is_on_the_command_line(fake, capsys):
    parser = build_parser()
    assert parser.parse_args(["lab", "--backend", "fake"]).backends == ("fake",)
    assert parser.parse_args(["lab", "--backends", "fake"]).backends == ("fake",)
    assert parser.parse_args(["check", "m:f", "--framework", "fake"]).framework
    assert parser.parse_args(["grad", "--backends", "fake"]).backends == ("fake",)
    for command in ("run", "grad", "read", "shard", "train"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert "numpy,torch,jax,fake" in capsys.readouterr().out, command
    with pytest.raises(SystemExit):
        main(["run", "--backends", "mlx"])
    assert "choose from numpy, torch, jax, fake or all" in capsys.readouterr().err


def test_a_registered_backend_runs_in_triptych_run(fake, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["run", "--tiny", "--backends", "numpy,fake", "--output-dir", str(out)]
    assert main([*argv, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert list(document["backends"]) == ["numpy", "fake"]
    assert (out / "attention_heatmaps_fake.png").exists()
