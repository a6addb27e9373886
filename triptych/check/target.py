"""Finding what `triptych check TARGET` names: `module:function` or
`path/to/file.py:function` (the part after the last colon may be dotted, e.g.
`torch.nn:MultiheadAttention` or `mymodel:Block.attention`), with a glob in
a path (`submissions/*.py:attention`) expanded here, in sorted order, so that
it works whatever the shell did with it.

What the user can mend raises `TargetError` (one line; the command's exit
code 2): no such file or module, no such name, not callable. An
implementation whose own code raises while it is imported raises
`TargetImportError`: that is its fault, a FAIL.
"""

from __future__ import annotations

import contextlib
import contextvars
import glob
import importlib
import importlib.util
import inspect
import sys
import types
from pathlib import Path

from shared import registry
from triptych.common.errors import CommandError

OPTION_PREFIX = contextvars.ContextVar("option_prefix", default="--")
"""How the options are spelled in messages: --signature for the command,
--attention-signature in the pytest plugin (`options_spelled`)."""


def option(name: str) -> str:
    """'--signature', or '--attention-signature' inside the pytest plugin."""
    return OPTION_PREFIX.get() + name


@contextlib.contextmanager
def options_spelled(prefix: str):
    """Messages name the options with `prefix` ("--attention-") meanwhile."""
    token = OPTION_PREFIX.set(prefix)
    try:
        yield
    finally:
        OPTION_PREFIX.reset(token)


def a(word: str) -> str:
    """'a dict', 'an int': the word with its indefinite article."""
    return ("an " if word[:1].lower() in "aeiou" else "a ") + word


class TargetError(CommandError):
    """The target cannot be checked, and the user can mend that."""


class TargetImportError(Exception):
    """The target's own code raised while it was imported."""


def expand(specs: list[str]) -> list[str]:
    """Each spec, a path with a glob replaced by every file it matches.

    Raises:
        TargetError: a glob that matches no file, a path that is no file (a
            typo stops the command before any target runs, as pytest does).
    """
    found = []
    for spec in specs:
        where, _, name = spec.rpartition(":")
        if where and glob.has_magic(where):
            paths = sorted(glob.glob(where))
            if not paths:
                raise TargetError(f"{spec}: no file matches {where}")
            found += [f"{path}:{name}" for path in paths]
        else:
            if where and is_path(where) and not Path(where).is_file():
                raise TargetError(f"{where}: no such file")
            found.append(spec)
    return found


def load(spec: str):
    """The object `spec` names.

    Raises:
        TargetError: a spec of the wrong form, a file or module that does not
            exist, a name it does not have, an object that is not callable.
        TargetImportError: importing the module raised.
    """
    where, _, name = spec.rpartition(":")
    if not where or not name:
        raise TargetError(
            f"{spec}: a TARGET is module:function or path/to/file.py:function"
        )
    module = import_file(where) if is_path(where) else import_module(where)
    found = module
    for part in name.split("."):
        if not hasattr(found, part):
            near = close_to(part, dir(found)) if found is module else ""
            raise TargetError(f"{spec}: {where} has no {name}{near}")
        found = getattr(found, part)
    if not callable(found):
        raise TargetError(f"{spec}: {name} is {a(type(found).__name__)}, not callable")
    if is_path(where) and "." not in name:
        return own_module(module, found)
    return found


DYNAMIC = ("import *", "globals(", "vars(", "exec(", "setattr(", "__getattr__",
           "sys.modules", "global ")  # fmt: skip
"""What can bind a module's name that its source does not spell: where a
file says one, `missing` leaves the name to the import."""


def missing(spec: str) -> str | None:
    """The error of a file's spec whose name its source never binds at the
    top level (a typo: `good.py:atention`), read without importing it, so
    that no process starts for it; None where it may be there."""
    import ast

    where, _, name = spec.rpartition(":")
    if not where or not name or not is_path(where) or not Path(where).is_file():
        return None
    try:
        source = Path(where).read_text()
        tree = ast.parse(source)
    except (SyntaxError, ValueError, UnicodeDecodeError, OSError):
        return None  # the import says what is wrong with it
    if any(word in source for word in DYNAMIC):
        return None
    bound: set[str] = set()
    defines = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
    for node in ast.walk(tree):  # every name bound anywhere: no false "has no"
        if isinstance(node, defines):
            bound.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, ast.alias):
            bound.add(node.asname or node.name.split(".")[0])
        elif isinstance(node, ast.ExceptHandler | ast.MatchAs) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.MatchStar | ast.MatchMapping):
            bound.add(getattr(node, "name", None) or getattr(node, "rest", "") or "")
    first = name.split(".")[0]
    if first in bound:
        return None
    return f"{spec}: {where} has no {name}{close_to(first, bound)}"


def close_to(name: str, names) -> str:
    """' (did you mean attention?)' where one of `names` is close; else ''."""
    import difflib

    found = difflib.get_close_matches(name, [n for n in names if n[:1] != "_"], 1)
    return f" (did you mean {found[0]}?)" if found else ""


def own_module(module: types.ModuleType, found):
    """What a file's `name` stands for: `found`, unless it is a function the
    file imports from a library (its module not the file's, nor a file beside
    it) and the file defines one module class of its own (a model file
    importing its library's `attention` helper): then that class, as the
    file's attention."""
    origin = getattr(found, "__module__", None) or ""
    beside = Path(module.__file__).parent
    home = sys.modules.get(origin)
    home_file = getattr(home, "__file__", None) or ""
    if origin == module.__name__ or not inspect.isroutine(found):
        return found
    if home_file and Path(home_file).parent == beside:
        return found  # the student's own helper file
    classes = [
        value
        for value in vars(module).values()
        if inspect.isclass(value)
        and value.__module__ == module.__name__
        and any(base.__name__ == "Module" for base in value.__mro__[1:])
    ]
    return classes[0] if len(classes) == 1 else found


def is_path(where: str) -> bool:
    return where.endswith(".py") or "/" in where or "\\" in where


def import_file(where: str) -> types.ModuleType:
    """The Python file `where`, imported under a name of its own (its folder
    first on sys.path, so that it can import its neighbours)."""
    path = Path(where)
    if not path.is_file():
        raise TargetError(f"{where}: no such file")
    name = "triptych_check_target_" + "".join(
        c if c.isalnum() else "_" for c in str(path.resolve())
    )
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise TargetError(f"{where}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(path.resolve().parent))
    try:
        spec.loader.exec_module(module)
    except BaseException as error:
        if isinstance(error, KeyboardInterrupt):
            raise
        raise import_error(where, error) from error
    return module


def import_module(where: str) -> types.ModuleType:
    try:
        return importlib.import_module(where)
    except ModuleNotFoundError as error:
        if error.name and (where == error.name or where.startswith(error.name + ".")):
            raise TargetError(f"{where}: no module named {error.name}") from None
        raise import_error(where, error) from error
    except Exception as error:
        raise import_error(where, error) from error


def import_error(where: str, error: BaseException) -> Exception:
    """What an import that raised is: a framework not installed here (a
    TargetError: the user mends that), else the target's own fault."""
    missing = getattr(error, "name", None) or ""
    framework = registry.owner_of_module(missing)
    if isinstance(error, ModuleNotFoundError) and framework is not None:
        return TargetError(
            f"{where} needs {missing}, which is not installed here: "
            + registry.install_command(registry.get(framework).install.extra)
        )
    return TargetImportError(f"importing {where} raised {one_line(error)}")


def one_line(error: BaseException) -> str:
    """'ValueError: message', the message cut to its first line."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def detect_framework(target) -> str:
    """The backend (shared.registry) whose arrays the target computes with.

    A torch or flax module is its framework's; otherwise the module the target
    comes from, or the framework its module imports (torch or jax; numpy when
    none).

    Raises:
        TargetError: its module imports both torch and jax.
    """
    owner = (
        target if inspect.isclass(target) or callable_function(target) else type(target)
    )
    name = getattr(owner, "__module__", None) or ""
    root = registry.owner_of_module(name)
    if root and not registry.get(root).arrays.numpy:
        return root
    namespace = getattr(owner, "__globals__", None)
    if namespace is None:
        namespace = vars(sys.modules[name]) if name in sys.modules else {}
    found = []
    for value in list(namespace.values()):
        origin = value.__name__ if isinstance(value, types.ModuleType) else ""
        origin = origin or (getattr(value, "__module__", None) or "")
        framework = registry.owner_of_module(str(origin))
        if framework and not registry.get(framework).arrays.numpy:
            found.append(framework)
    found = [f for f in registry.names() if f in found]  # the registry's order
    if len(found) > 1:
        raise TargetError(
            f"{name} imports both {' and '.join(found)}: name the framework with "
            f"{option('framework')}"
        )
    return found[0] if found else registry.reference().name


def callable_function(target) -> bool:
    return (
        inspect.isfunction(target)
        or inspect.isbuiltin(target)
        or inspect.ismethod(target)
    )
