"""The README's "Using a backend" example runs, for every selected backend."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from helpers import name_of

from shared import assert_close
from shared.golden import load_golden

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_example_runs_and_gives_the_oracles_numbers(backend):
    text = README.read_text()
    (example,) = re.findall(r"```python\n(import impl_torch as attn.*?)```", text, re.S)
    example = example.replace(
        "import impl_torch as", f"import impl_{name_of(backend)} as"
    )
    namespace: dict = {}
    exec(compile(example, "README.md", "exec"), namespace)
    out, weights = namespace["out"], namespace["weights"]
    g = load_golden("tiny")
    assert_close(backend.to_numpy(weights), g["multi_weights"], "float32", "weights")
    assert_close(backend.to_numpy(out), g["multi_out"], "float32", "out")
    assert np.asarray(backend.to_numpy(namespace["entropy"])).shape == (4, 8)


def test_the_example_says_which_install_runs_it():
    """impl_* are the development install's (the repository's folders): the
    example says so before its code, and that install is in the README."""
    text = README.read_text()
    before = text.split("## In a few lines", 1)[1].split("```python", 1)[0]
    assert "development install" in before and ".venv/bin/python" in before
    assert 'pip install -c constraints.txt -e ".[all,layers,dev]"' in text
