"""Build the notebooks: python notebooks/build.py

One notebook per chapter of the page and framework, in nbformat 4.5
(<chapter>_<framework>.ipynb, what Jupyter and Colab open) with its
jupytext-paired source in percent format (<chapter>_<framework>.py, the
readable diff). The lesson's is built from impl_<framework>/lesson.py: the
lesson's functions as they are, a float64 oracle in plain loops, a seeded
problem and the distance of the lesson's float32 output to the oracle, held
below float32's tolerance (shared/tolerances.py); it imports only NumPy and
the framework, so it runs in Colab as it is. Every other chapter's
(notebooks/chapters.py lists them) holds the chapter's functions as the page
shows them, after a first cell that installs the project where it is not
importable (in Colab: from REPOSITORY with pip; in the test envs it does
nothing), and runs them against shared/'s oracle. `--check` builds nothing
and exits 1 when a notebook is not what its sources give
(tests/test_notebooks.py runs it), so a notebook cannot drift.
"""

from __future__ import annotations

import ast
import re
import sys
import textwrap
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shared import registry  # noqa: E402 (the repository's, found from here)
from shared.tolerances import tolerance  # noqa: E402
from triptych.read.chapters import PAGE  # noqa: E402 (the page's chapters)

sys.path.insert(0, str(ROOT / "notebooks"))
import chapters  # noqa: E402 (notebooks/chapters.py: the list)
import run_cells  # noqa: E402 (notebooks/run_cells.py: the cells that run them)
from formats import notebook, percent  # noqa: E402 (notebooks/formats.py)

SLUGS = ("lesson", *chapters.RUNS)
"""The chapters with a notebook: <slug>_<framework>.ipynb for each framework."""

HERE = ROOT / "notebooks"
PROJECT = ("shared", "impl_numpy", "impl_torch", "impl_jax", "triptych")
REPOSITORY = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"][
    "Repository"
].removeprefix("https://github.com/")
"""The repository on GitHub (owner/name), from pyproject.toml's
[project.urls]: where the first cell of a chapter notebook installs the
project from, and where docs/teaching.md's Colab links open the notebooks
(tests/test_teaching.py holds them to it). A fork sets its own there,
rebuilds, and rewrites the links."""
ARRAYS = {  # framework: (to its float32 array, back to NumPy's float64)
    "numpy": ("np.asarray({}, np.float32)", "np.asarray({}, np.float64)"),
    "torch": ("torch.tensor({}, dtype=torch.float32)", "{}.double().numpy()"),
    "jax": ("jnp.asarray({}, jnp.float32)", "np.asarray({}, np.float64)"),
}
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
    needs = " and ".join(dict.fromkeys(("NumPy", title)))  # NumPy's: NumPy alone
    note = f"This notebook needs {needs} only, which Colab has."
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


SETUP = """# Setup: where the project is not importable (in Colab), install it from
# its repository with pip (Colab's own NumPy, torch and JAX are enough);
# where it is (a clone after `pip install -e .`), nothing happens.
import importlib
import importlib.util
import subprocess
import sys

REPOSITORY = "https://github.com/{repository}"
if importlib.util.find_spec("impl_numpy") is None:
    print(f"installing attention-triptych from {{REPOSITORY}}")
    package = f"attention-triptych @ git+{{REPOSITORY}}"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", package], check=True)
    importlib.invalidate_caches()"""


def shown(tree: ast.Module, names: tuple[str, ...]) -> list[ast.stmt]:
    """The top-level functions and classes of `names` found in the file, in
    the chapter's order (a name the framework does not have is left out)."""
    found = {n.name: n for n in tree.body
             if isinstance(n, ast.FunctionDef | ast.ClassDef)}  # fmt: skip
    return [found[name] for name in names if name in found]


def used_imports(
    tree: ast.Module, module: str, nodes: list[ast.stmt], framework: str, after: str
) -> str:
    """The file's imports that the shown code uses, those of the cells after
    it (`after`: the problem and run cells), and an import from the file
    itself of its other names that the shown code calls."""
    used = {n.id for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name)}
    used |= {"np"} | names_in(after) & {"math"}  # the problem's, the run's
    defined = {node.name for node in nodes}
    plain = {"import numpy as np"} | {f"import {n}" for n in {"math"} & used}
    froms = {}
    compiler = registry.get(framework).compiler
    if compiler is not None and compiler.traces:  # run_cell calls it: jax.jit
        top = compiler.name.split(".")[0]
        plain |= {f"import {top}"} & {f"import {n}" for n in names_in(after)}
    tried = [n for t in tree.body if isinstance(t, ast.Try) for n in t.body]
    for node in tree.body + tried:  # impl_torch/kernel.py: Triton's, in a try
        if isinstance(node, ast.Import):
            plain |= {f"import {a.name}" + (f" as {a.asname}" if a.asname else "")
                      for a in node.names if (a.asname or a.name) in used}  # fmt: skip
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            froms.setdefault(node.module, set()).update(
                a.name + (f" as {a.asname}" if a.asname else "")
                for a in node.names if (a.asname or a.name) in used)  # fmt: skip
        elif isinstance(node, ast.FunctionDef | ast.ClassDef | ast.Assign):
            names = [node.name] if hasattr(node, "name") else [
                n.id for n in node.targets if isinstance(n, ast.Name)]  # fmt: skip
            froms.setdefault(module, set()).update(
                n for n in names if n in used and n not in defined)  # fmt: skip
    groups = [[], [], []]  # the standard library's, other packages', the project's
    for line in sorted(plain):
        groups[line.split()[1].split(".")[0] not in sys.stdlib_module_names].append(
            line
        )
    for source in sorted(m for m in froms if froms[m]):
        names = ", ".join(sorted(froms[source]))
        line = f"from {source} import {names}"
        if len(line) > 79:
            wrapped = textwrap.fill(names, 75, initial_indent="    ",
                                    subsequent_indent="    ")  # fmt: skip
            line = f"from {source} import (\n{wrapped},\n)"
        top = source.split(".")[0]
        groups[2 if top in PROJECT else top not in sys.stdlib_module_names].append(line)
    lines = ["\n".join(group) for group in groups if group]
    return "\n\n".join(lines)


def frameworks_of(slug: str) -> tuple[str, ...]:
    """The frameworks that have a notebook of this chapter: every one, or
    those of chapters.ONLY (flax's training step: JAX alone)."""
    return chapters.ONLY.get(slug, tuple(ARRAYS))


def chapter_of(slug: str):
    """The page's chapter of this slug (triptych/read/chapters.py's PAGE)."""
    return next(c for c in PAGE if c.slug == slug)


def chapter_file(slug: str, framework: str) -> str:
    """The module of impl_<framework> that a chapter's notebook shows."""
    return chapter_of(slug).file_of(framework).removesuffix(".py")


STATIC_WORDS = {"mesh": "the devices"}
"""What a static argument decides, where it is not the shapes."""


def runs(slug: str, framework: str) -> tuple[str, str, tuple[str, ...]]:
    """A chapter's run cell in `framework`, the function it calls and the
    arguments that decide shapes: the framework's own (chapters.OWN_RUNS),
    or the chapter's (chapters.RUNS)."""
    return chapters.OWN_RUNS.get((slug, framework), chapters.RUNS[slug])


def run_cell(slug: str, framework: str) -> str:
    """The cell that runs a chapter's function against the oracle: through
    the framework's compiler where it traces (jax.jit), as written elsewhere."""
    template, function, static = runs(slug, framework)
    compiler = registry.get(framework).compiler
    call, how = function, "run as written, one operation at a time"
    if compiler is not None and compiler.traces:
        names = ", ".join(f'"{name}"' for name in static)
        names = f"({names})" if len(static) > 1 else names
        names = f", static_argnames={names}" if static else ""
        call = f"{compiler.name}({function}{names})"
        how = "traced once, compiled as one program"
        decides = [f"{n} decides {STATIC_WORDS.get(n, 'shapes')}" for n in static]
        if len(static) == 1:
            how += f"; {decides[0]}: static"
        elif static:  # a line of their own
            how += f";\n# {', '.join(decides)}: static"
        if compiler.forget:  # what the cells above say now, not a kept trace
            how += f"\n{compiler.forget}  # an edit above is traced anew"
    return template.format(framework=framework, call=call, how=f"# {how}")


def chapter_cells(slug: str, framework: str) -> list[tuple[str, str]]:
    """(kind, text) of each cell of a chapter's notebook in `framework`."""
    chapter = chapter_of(slug)
    file = f"{chapter_file(slug, framework)}.py"
    source = (ROOT / f"impl_{framework}" / file).read_text()
    tree, lines = ast.parse(source), source.splitlines()
    extra, words = chapters.SHOWN_TOO.get(slug, ((), ""))
    nodes = shown(tree, (*chapter.names, *extra))
    module = f"impl_{framework}.{chapter_file(slug, framework)}"
    title = registry.get(framework).title
    defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    aliased = {name for own, name in chapter.aliases if own in defined}  # __call__
    missing = [name for name in chapter.names
               if name not in {n.name for n in nodes} | aliased]  # fmt: skip
    note = (
        f"The first code cell installs the project where it is missing (in "
        f"Colab). The functions are `impl_{framework}/{file}`'s, as the page "
        f"shows them: edit one and rerun the cells below it. {words}"
    ).rstrip()
    intro = "\n\n".join([f"# {chapter.title}, in {title}", ast.get_docstring(tree),
                          "\n".join(textwrap.wrap(note, 79))])  # fmt: skip
    run = run_cell(slug, framework)
    problem = problem_cell(framework, run)
    imports = used_imports(tree, module, nodes, framework, problem + "\n" + run)
    found = [("markdown", intro), ("code", SETUP.format(repository=REPOSITORY))]
    if (slug, framework) in chapters.BEFORE_IMPORTS:  # devices, interpreter
        found.append(("code", chapters.BEFORE_IMPORTS[slug, framework]))
    found.append(("code", imports))
    for node in nodes:
        start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        found.append(("code", "\n".join(lines[start - 1 : node.end_lineno])))
    if missing:
        names = ", ".join(
            f"`{name}` ({' and '.join(holders(slug, name))})" for name in missing
        )
        absent = chapter.absent
        for page, own in chapters.NOTEBOOK_WORDS.items():
            absent = absent.replace(page, own)
        note = f"Not in {title}'s {file}: {names}. {absent}"
        found.append(("markdown", "\n".join(textwrap.wrap(note, 79))))
    found += [
        ("markdown", "## Against the float64 oracle, in float32"),
        ("code", problem),
        ("code", run),
        ("markdown", "\n".join(textwrap.wrap(chapters.CLOSING[slug], 79))),
    ]
    return found


def holders(slug: str, name: str) -> list[str]:
    """The frameworks ("JAX's") whose file of this chapter defines `name`
    at its top level: where a function missing in one framework is."""
    found = []
    for framework in ARRAYS:
        path = ROOT / f"impl_{framework}" / f"{chapter_file(slug, framework)}.py"
        tree = ast.parse(path.read_text()) if path.exists() else ast.Module([], [])
        if shown(tree, (name,)):
            found.append(f"{registry.get(framework).title}'s")
    return found


def names_in(code: str) -> set[str]:
    """The names a piece of Python reads or writes."""
    return {n.id for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Name)}


def problem_cell(framework: str, run: str) -> str:
    """run_cells.PROBLEM for `framework`, less what the run cell after it does
    not need: each statement kept only if a name it binds is read after it
    (by the run cell or a statement kept), each import only for its names
    read; last first, so that a statement's own reads count."""
    source = run_cells.PROBLEM.format(framework=framework)
    lines = source.splitlines()
    reads = names_in(run)
    for node in reversed(ast.parse(source).body):
        span = slice(node.lineno - 1, node.end_lineno)
        if isinstance(node, ast.ImportFrom):
            names = [a.name for a in node.names if a.name in reads]
            kept = [f"from {node.module} import {', '.join(names)}"] if names else []
            lines[span] = kept
            continue
        bound = (
            {node.name}
            if isinstance(node, ast.FunctionDef)
            else names_in("\n".join(ast.unparse(t) for t in node.targets))
        )
        if bound & reads:
            reads |= names_in(ast.unparse(node))
        else:
            lines[span] = []
    text = re.sub(r"\n{4,}", "\n\n\n", "\n".join(lines))  # two blank lines at most
    return text.strip("\n")


def built() -> dict[Path, str]:
    """Every notebook file and the text it must hold."""
    files = {}
    for slug in SLUGS:
        for framework in frameworks_of(slug):
            found = (
                cells(framework) if slug == "lesson" else chapter_cells(slug, framework)
            )
            files[HERE / f"{slug}_{framework}.py"] = percent(found)
            files[HERE / f"{slug}_{framework}.ipynb"] = notebook(found)
    return files


def main(argv: list[str]) -> int:
    if {"-h", "--help"} & set(argv):
        print(__doc__)
        return 0
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
