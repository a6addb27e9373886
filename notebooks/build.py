"""Build the lesson notebooks from the lesson files: python notebooks/build.py

For each framework, notebooks/lesson_<framework>.py (jupytext's percent
format, the readable diff) and notebooks/lesson_<framework>.ipynb (nbformat
4.5, what Jupyter and Colab open) from impl_<framework>/lesson.py: the
lesson's functions as they are, a float64 oracle in plain loops, a seeded
problem and the distance of the lesson's float32 output to the oracle,
held below float32's tolerance (shared/tolerances.py). They import only
NumPy and the framework, so they run in Colab as they are, without the
project installed. `--check` builds nothing and exits 1 when a notebook is
not what the lesson file gives (tests/test_notebooks.py runs it), so a
notebook cannot drift from its lesson.
"""

from __future__ import annotations

import ast
import json
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shared import registry  # noqa: E402 (the repository's, found from here)
from shared.tolerances import tolerance  # noqa: E402

HERE = ROOT / "notebooks"
ARRAYS = {  # framework: (to its float32 array, back to NumPy's float64)
    "numpy": ("np.asarray({}, np.float32)", "np.asarray({}, np.float64)"),
    "torch": ("torch.tensor({}, dtype=torch.float32)", "{}.double().numpy()"),
    "jax": ("jnp.asarray({}, jnp.float32)", "np.asarray({}, np.float64)"),
}
HEADER = """# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---
"""
ORACLE = '''def oracle(x, w_q, w_k, w_v, w_o=None, n_heads=1):
    """Causal self-attention in float64, one query and one head at a time,
    in plain loops: out (..., T, C or D)."""
    x, w_q, w_k, w_v = (np.asarray(a, np.float64) for a in (x, w_q, w_k, w_v))
    *B, T, _ = x.shape
    D = w_q.shape[1] // n_heads
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    out = np.zeros((*B, T, w_q.shape[1]))
    for b in np.ndindex(*B):
        for h in range(n_heads):
            cols = slice(h * D, (h + 1) * D)
            for i in range(T):
                scores = [q[b][i, cols] @ k[b][j, cols] / math.sqrt(D)
                          for j in range(i + 1)]  # keys 0 to i only
                top = max(scores)
                e = [math.exp(s - top) for s in scores]
                out[b][i, cols] = sum(w / sum(e) * v[b][j, cols]
                                      for j, w in enumerate(e))
    return out if w_o is None else out @ np.asarray(w_o, np.float64)
'''
RUN = """def f32(a):
    return {to}


def f64(a):
    return {back}


rng = np.random.default_rng(0)
x = rng.standard_normal((2, 6, 8))  # (B, T, C)
w = [rng.standard_normal((8, 8)) / math.sqrt(8) for _ in range(4)]
one = [a[:, :4] for a in w[:3]]  # one head of width D = 4
ATOL, RTOL = {atol!r}, {rtol!r}  # float32's tolerance (shared/tolerances.py)

out, weights = single_head_attention(f32(x), *map(f32, one))
distance = np.abs(f64(out) - oracle(x, *one)).max()
print(f"one head: max |out - oracle| = {{distance:.2e}}")
assert np.allclose(f64(out), oracle(x, *one), atol=ATOL, rtol=RTOL)

out, weights = multi_head_attention(f32(x), *map(f32, w), 2)
distance = np.abs(f64(out) - oracle(x, *w, n_heads=2)).max()
print(f"two heads: max |out - oracle| = {{distance:.2e}}")
assert np.allclose(f64(out), oracle(x, *w, n_heads=2), atol=ATOL, rtol=RTOL)
"""
CLOSING = """Try it: change step 5 to keep the other triangle, rerun, and the
distance to the oracle grows. The exercises (exercises/README.md in the
repository) ask for these lines one step at a time, with a grader that names
the mistake."""


def cells(framework: str) -> list[tuple[str, str]]:
    """(kind, text) of each cell of the framework's lesson notebook."""
    source_file = ROOT / f"impl_{framework}" / "lesson.py"
    source = source_file.read_text()
    tree = ast.parse(source)
    lines = source.splitlines()
    imports = [ast.get_source_segment(source, n) for n in tree.body
               if isinstance(n, ast.Import | ast.ImportFrom)]  # fmt: skip
    if "import numpy as np" not in imports:
        imports.append("import numpy as np")
    functions = [
        "\n".join(lines[n.lineno - 1 : n.end_lineno])
        for n in tree.body
        if isinstance(n, ast.FunctionDef)
    ]
    title = registry.get(framework).title
    to, back = ARRAYS[framework]
    level = tolerance("float32")
    note = (
        f"This notebook needs NumPy and {title} only (Colab has both). It is "
        f"built from `impl_{framework}/lesson.py` by `notebooks/build.py`: edit "
        "the lesson, not the notebook."
    )
    intro = "\n\n".join(
        [f"# Causal self-attention in {title}: the lesson", ast.get_docstring(tree),
         "\n".join(textwrap.wrap(note, 79))]
    )  # fmt: skip
    run = RUN.format(
        to=to.format("a"), back=back.format("a"), atol=level.atol, rtol=level.rtol
    )
    plain = sorted(i for i in imports if i == "import math")
    others = sorted(i for i in imports if i not in plain)
    found = [("markdown", intro), ("code", "\n\n".join(
        "\n".join(group) for group in (plain, others) if group))]  # fmt: skip
    found += [("code", f) for f in functions]
    found += [
        ("markdown", "## The float64 oracle: the same attention in plain loops"),
        ("code", ORACLE),
        ("markdown", "## The lesson against the oracle, in float32"),
        ("code", run),
        ("markdown", CLOSING),
    ]
    return found


def percent(found: list[tuple[str, str]]) -> str:
    """The jupytext percent-format source of the cells."""
    parts = [HEADER]
    for kind, text in found:
        if kind == "markdown":
            body = "\n".join(("# " + line).rstrip() for line in text.splitlines())
            parts.append(f"# %% [markdown]\n{body}\n")
        else:
            parts.append(f"# %%\n{text.rstrip()}\n")
    return "\n".join(parts)


def notebook(found: list[tuple[str, str]]) -> str:
    """The .ipynb (nbformat 4.5) of the cells, without outputs."""
    nb_cells = []
    for i, (kind, text) in enumerate(found):
        lines = text.rstrip().splitlines(keepends=True)
        cell = {"cell_type": kind, "id": f"cell-{i}", "metadata": {}, "source": lines}
        if kind == "code":
            cell.update(execution_count=None, outputs=[])
        nb_cells.append(cell)
    document = {
        "cells": nb_cells,
        "metadata": {
            "jupytext": {"formats": "ipynb,py:percent"},
            "kernelspec": {
                "display_name": "Python 3",
                "language": "python",
                "name": "python3",
            },
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(document, indent=1) + "\n"


def built() -> dict[Path, str]:
    """Every notebook file and the text it must hold."""
    files = {}
    for framework in ARRAYS:
        found = cells(framework)
        files[HERE / f"lesson_{framework}.py"] = percent(found)
        files[HERE / f"lesson_{framework}.ipynb"] = notebook(found)
    return files


def main(argv: list[str]) -> int:
    files = built()
    stale = [p for p, text in files.items() if not p.exists() or p.read_text() != text]
    if "--check" in argv:
        for path in stale:
            print(f"{path.relative_to(ROOT)}: stale, run python notebooks/build.py")
        return 1 if stale else 0
    for path, text in files.items():
        path.write_text(text)
    print(f"wrote {len(files)} files in notebooks/")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
