"""One direction of imports, read from the code's own import statements with
the standard library's ast: those at the top of a module and those inside its
functions alike (docs/architecture.md).

    shared  <-  impl_*  <-  triptych.common  <-  a command  <-  triptych.cli

- shared imports no impl_* and no triptych, and no framework;
- an impl_* imports shared and itself only: no other impl_*, no triptych;
- triptych.common imports no command and not the command line;
- a command (a module or package right under triptych/: run, lab, read, grad,
  train, bench) imports no other command and not the command line;
- no module of triptych imports torch, jax, flax, optax or matplotlib at its top;
- nothing imports in a circle.

An import is an edge to the module whose code it runs for the names it takes:
`from triptych.bench import memory` is an edge to triptych.bench.memory,
`from triptych.bench.config import QUICK` one to triptych.bench.config. (A
package's __init__ also runs when one of its modules is imported; a package
that imports its own modules is no circle.) The last tests plant trees that
break each rule and show that the checker says so.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from triptych.cli import SUBCOMMANDS

pytestmark = pytest.mark.neutral  # once, in the jax env (docs/suite.md)

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("shared", "impl_numpy", "impl_torch", "impl_jax", "triptych")
FRAMEWORKS = {"torch", "jax", "jaxlib", "flax", "optax", "matplotlib"}
COMMAND_LINE = "triptych"  # the part of triptych, triptych.cli, triptych.__main__


def find_modules(root: Path) -> dict[str, Path]:
    """Every module of PACKAGES under `root` by dotted name (a package's
    __init__.py by the package's name)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported_names(name: str, path: Path) -> list[tuple[str, bool]]:
    """(module name, at the top of the module?) of every import in `path`,
    `from A import b` giving A.b, relative ones made absolute; also
    importlib.import_module("...") with a literal name."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []

    def visit(node: ast.AST, top: bool) -> None:
        if isinstance(node, ast.Import):
            found.extend((alias.name, top) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            found.extend((f"{base}.{alias.name}", top) for alias in node.names)
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None))
            == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            found.append((node.args[0].value, top))
        inside = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        for child in ast.iter_child_nodes(node):
            visit(child, top and not inside)

    visit(ast.parse(path.read_text(), str(path)), True)
    return found


def resolve(imported: str, modules: dict[str, Path]) -> str | None:
    """The module of ours whose code an import of `imported` runs for its
    names: the longest dotted prefix of it that is one (None: not ours)."""
    parts = imported.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in modules:
            return ".".join(parts[:end])
    return None


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the modules of ours it imports, anywhere in it."""
    modules = find_modules(root)
    graph = {}
    for name, path in modules.items():
        targets = {resolve(i, modules) for i, _ in imported_names(name, path)}
        graph[name] = targets - {None, name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The circles of imports: each strongly connected set of two or more
    modules, sorted (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted(found)


def part(module: str) -> str:
    """The part a module belongs to: shared, impl_numpy, ..., triptych.common,
    triptych.<command>, or COMMAND_LINE."""
    top, *rest = module.split(".")
    if top != "triptych":
        return top
    if not rest or rest[0] in ("cli", "__main__"):
        return COMMAND_LINE
    return f"triptych.{rest[0]}"


def may_import(importer: str, imported: str) -> bool:
    """Whether part `importer` may import part `imported`."""
    if importer == imported or imported == "shared":
        return True
    if importer == "shared" or importer.startswith("impl_"):
        return False
    # triptych: impl_* and common from anywhere in it, anything from the top
    return (
        imported.startswith("impl_")
        or imported == "triptych.common"
        or importer == COMMAND_LINE
    )


def wrong_way(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, imported) of every import against the direction."""
    return sorted(
        (module, target)
        for module, targets in graph.items()
        for target in targets
        if not may_import(part(module), part(target))
    )


def framework_imports(root: Path) -> list[tuple[str, str]]:
    """(module, framework) where shared imports a framework anywhere, or a
    module of triptych imports one at its top (the command line must start
    without them)."""
    found = []
    for name, path in find_modules(root).items():
        for imported, top in imported_names(name, path):
            framework = imported.split(".")[0]
            if framework in FRAMEWORKS and (
                part(name) == "shared" or (name.startswith("triptych") and top)
            ):
                found.append((name, framework))
    return sorted(found)


def commands(root: Path) -> set[str]:
    """The commands: the modules and packages right under triptych/ that are
    neither its common parts nor its command line."""
    parts = {part(name) for name in find_modules(root) if name.startswith("triptych")}
    return {p.removeprefix("triptych.") for p in parts - {COMMAND_LINE}} - {"common"}


# This project ---------------------------------------------------------------


def test_no_module_imports_in_a_circle():
    assert cycles(import_graph(ROOT)) == []


def test_every_import_goes_one_way():
    assert wrong_way(import_graph(ROOT)) == []


def test_no_framework_where_there_must_be_none():
    assert framework_imports(ROOT) == []


def test_the_commands_are_what_the_command_line_offers():
    assert commands(ROOT) == set(SUBCOMMANDS)


def test_the_checker_reads_imports_inside_functions_too():
    """Today's triptych.run imports its results, report and plots only inside
    its functions (to start quickly); the graph has them all the same."""
    assert {"triptych.run.results", "triptych.run.report", "triptych.run.plots"} <= (
        import_graph(ROOT)["triptych.run"]
    )


# The checker, on planted trees ------------------------------------------------


def plant(root: Path, files: dict[str, str]) -> Path:
    """Write `files` (path: source) under `root`, with an empty __init__.py in
    every folder that has none."""
    for relative, source in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    for folder in {p.parent for p in root.rglob("*.py")}:
        if folder != root and not (folder / "__init__.py").exists():
            (folder / "__init__.py").write_text("")
    return root


def test_a_planted_cycle_hidden_in_a_function_is_found(tmp_path):
    root = plant(
        tmp_path,
        {
            "triptych/common/files.py": "def stage():\n"
            "    from triptych.bench.sweep import ROWS\n",
            "triptych/bench/sweep.py": "from ..common import files\nROWS = 1\n",
            "triptych/bench/__init__.py": "from triptych.bench import sweep\n",
        },
    )
    graph = import_graph(root)
    assert graph["triptych.bench.sweep"] == {"triptych.common.files"}  # relative
    assert cycles(graph) == [["triptych.bench.sweep", "triptych.common.files"]]
    assert wrong_way(graph) == [("triptych.common.files", "triptych.bench.sweep")]


def test_planted_upward_and_sideways_imports_are_found(tmp_path):
    root = plant(
        tmp_path,
        {
            "shared/config.py": "from impl_numpy import attention\n",
            "impl_numpy/attention.py": "import impl_jax.attention\n",
            "impl_jax/attention.py": "def f():\n    from triptych import cli\n",
            "triptych/cli.py": "from triptych import grad, run\n",
            "triptych/grad.py": "from triptych.run.report import Table\n",
            "triptych/run/report.py": "import importlib\n"
            "importlib.import_module('triptych.cli')\nTable = 1\n",
            "triptych/common/tables.py": "import shared.config\n",
        },
    )
    assert wrong_way(import_graph(root)) == [
        ("impl_jax.attention", "triptych.cli"),
        ("impl_numpy.attention", "impl_jax.attention"),
        ("shared.config", "impl_numpy.attention"),
        ("triptych.grad", "triptych.run.report"),
        ("triptych.run.report", "triptych.cli"),
    ]
    assert commands(root) == {"grad", "run"}


def test_a_framework_at_the_top_of_a_command_is_found(tmp_path):
    root = plant(
        tmp_path,
        {
            "triptych/run.py": "import numpy\nimport matplotlib.pyplot\n"
            "def plot():\n    import torch\n",
            "shared/dtypes.py": "def cast():\n    import jax.numpy\n",
        },
    )
    assert framework_imports(root) == [
        ("shared.dtypes", "jax"),
        ("triptych.run", "matplotlib"),
    ]


# Small rooms (docs/architecture.md, "Figures"): no module over MAX_LINES, no
# public function of a backend over MAX_PARAMETERS, and the figures the doc
# states of the code as it is, kept true.

MAX_LINES = 400
MAX_PARAMETERS = 12
ROOMS = ("impl_numpy", "impl_torch", "impl_jax", "shared", "triptych", "tools")
READING_PATH = ("lesson", "attention", "backward", "blockwise", "kv_cache")
READING_PATH += ("variants", "module", "sharded", "train")


def module_lines(root: Path) -> dict[str, int]:
    """Each module of ROOMS and its lines, by path."""
    return {
        path.relative_to(root).as_posix(): path.read_text().count("\n")
        for top in ROOMS
        for path in sorted((root / top).rglob("*.py"))
    }


def widest_signatures(root: Path) -> dict[str, int]:
    """The parameters of each public function and method of impl_* (self
    aside), by "path:name"."""
    found = {}
    for top in ("impl_numpy", "impl_torch", "impl_jax"):
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            for node in ast.parse(path.read_text()).body:
                if node.__class__ not in (ast.ClassDef, ast.FunctionDef):
                    continue
                if node.name.startswith("_"):
                    continue
                in_class = isinstance(node, ast.ClassDef)
                for f in node.body if in_class else [node]:
                    if not isinstance(f, ast.FunctionDef):
                        continue
                    if f.name.startswith("_") and f.name != "__init__":
                        continue
                    a = f.args
                    count = len(a.posonlyargs + a.args + a.kwonlyargs)
                    count += bool(a.vararg) + bool(a.kwarg) - in_class
                    name = f"{node.name}.{f.name}" if in_class else f.name
                    found[f"{rel}:{name}"] = count
    return found


def test_no_module_is_over_400_lines():
    big = {path: n for path, n in module_lines(ROOT).items() if n > MAX_LINES}
    assert not big, "split them into modules of one idea each"


def test_no_public_function_of_a_backend_takes_over_12_parameters():
    wide = {f: n for f, n in widest_signatures(ROOT).items() if n > MAX_PARAMETERS}
    assert not wide, "group them: biases=, variant=, a core's settings"


def test_a_planted_long_module_and_a_wide_function_are_found(tmp_path):
    root = plant(
        tmp_path,
        {
            "shared/long.py": "x = 1\n" * (MAX_LINES + 1),
            "impl_numpy/wide.py": "def f(" + ", ".join("abcdefghijklm") + "): ...\n",
        },
    )
    assert module_lines(root)["shared/long.py"] == MAX_LINES + 1
    assert widest_signatures(root)["impl_numpy/wide.py:f"] == 13


def test_the_figures_the_architecture_doc_states_are_the_codes():
    """docs/architecture.md's "now" column, as the code is now."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text.split("<!-- figures -->")[1]
    now = {
        name.strip(): value.strip()
        for name, _, value in (
            row.strip("|").split("|")[:3]
            for row in table.strip().splitlines()[2:]
            if row.startswith("|")
        )
    }
    lines = module_lines(ROOT)
    largest = max(lines, key=lines.get)
    over = sum(n > MAX_LINES for n in lines.values())
    assert now["modules over 400 lines"] == (
        f"{over}; the largest `{largest}`, {lines[largest]} lines"
    )
    widths = widest_signatures(ROOT)
    assert now["the widest public signature of impl_*"] == (
        f"{max(widths.values())} parameters"
    )
    paths = [
        sum(lines[f"impl_{b}/{name}.py"] for name in READING_PATH)
        for b in ("numpy", "torch", "jax")
    ]
    assert now["lines of the reading path (NumPy, PyTorch, JAX)"] == ", ".join(
        f"{n:,}" for n in paths
    )
