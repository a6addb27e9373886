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
