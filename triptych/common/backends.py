"""Loading the backends by name through the registry (shared.registry), with a
one-line message when one is missing, and each backend's hooks
(impl_<name>/backend.py); what `--backends` takes on the command line."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import platform
import types

from shared import registry
from shared.protocol import Backend
from triptych.common.errors import CommandError
from triptych.common.interrupt import stops_deferred

DTYPES = ("float32", "float64")
"""The dtypes of `triptych run`, `lab` and `grad`. `triptych bench --dtype` also
takes the half precisions (every name of `shared.dtypes.FLOAT_DTYPES`)."""

HOOKS = (
    "use_float64",
    "synchronize",
    "threads",
    "set_threads",
    "threads_fixed",
    "compiled",
    "gradients",
    "cuda_device",
    "use_device",
    "float32_matmuls",
    "reset_compiler",
    "uncached",
    "gemm",
    "gemm_library",
    "copy",
    "trainer",
    "poison",
    "ADDS",
    "EVERY_HEAD",
    "adds",
)
"""The names every impl_<name>/backend.py defines, in this order (each
file's docstrings say what its framework does for each)."""


class BackendMissingError(CommandError):
    """A backend was asked for but its framework is not installed."""


def load_backend(name: str) -> Backend:
    """The module impl_<name> (it keeps `shared.protocol.Backend`), or one clear
    line if its framework is missing. Loading "jax" turns on JAX's 64-bit mode
    for this process (docs/contract.md#float64-in-jax).

    Raises:
        ValueError: `name` is not a registered backend.
        BackendMissingError: its framework is not installed.
    """
    framework = registry.get(name)
    module = _import(framework, framework.package)
    # A program's choice, made here for triptych's: every command compares
    # float64 with the float64 oracle, and no impl_* changes a setting.
    hooks(name).use_float64()
    return module


def hooks(name: str) -> types.ModuleType:
    """impl_<name>.backend: what the tooling runs of the framework (HOOKS).

    Raises:
        ValueError: `name` is not a registered backend.
        BackendMissingError: its framework is not installed.
    """
    framework = registry.get(name)
    return _import(framework, f"{framework.package}.backend")


def _import(framework: registry.Framework, module: str) -> types.ModuleType:
    """The module, imported whole: a stop signal that arrives meanwhile is
    held until the import ends, then raised. Raised inside it, a
    KeyboardInterrupt can reach a framework's extension while it initialises
    (jaxlib's, from a callback into Python) and crash the process: SIGTERM
    during `import jax` ended `triptych bench` with a segmentation fault about
    one time in ten, where it ends with one line and 143."""
    try:
        with stops_deferred():
            return importlib.import_module(module)
    except ImportError as error:
        raise BackendMissingError(
            f"backend {framework.name!r} is not installed ({error.name or error}): "
            + registry.install_command(framework.install.extra)
        ) from None


def missing_package(backend: str) -> str | None:
    """The first package `backend` needs that is not installed, or None;
    found without importing anything."""
    return next(
        (
            p
            for p in registry.get(backend).install.requires
            if importlib.util.find_spec(p) is None
        ),
        None,
    )


def not_installed_line(names: list[str]) -> str:
    """The line a command prints for the backends "all" left out."""
    return "not installed, so not run: " + ", ".join(
        f"{name} ({registry.install_command(registry.get(name).install.extra)})"
        for name in names
    )


def installed_backends() -> list[str]:
    """The backends that import here, in the order of the registry."""
    found = []
    for name in registry.names():
        try:
            load_backend(name)
        except BackendMissingError:
            continue
        found.append(name)
    return found


def parse_backends(text: str) -> tuple[str, ...] | None:
    """'numpy,jax' -> ('numpy', 'jax'); 'all' -> None (every installed one).

    Spaces around names and empty items (a trailing comma) are ignored.

    Raises:
        argparse.ArgumentTypeError: an unknown name, or no name at all.
    """
    if text.strip() == "all":
        return None
    names = [name.strip() for name in text.split(",") if name.strip()]
    known = registry.names()
    for name in names:
        if name not in known:
            raise argparse.ArgumentTypeError(
                f"unknown backend {name!r}; choose from {', '.join(known)} or all"
            )
    if not names:
        raise argparse.ArgumentTypeError("name at least one backend, or all")
    return tuple(dict.fromkeys(names))  # in order, once each


def choose_backends(asked: tuple[str, ...] | None) -> tuple[list[str], list[str]]:
    """(the backends to run, those left out because they are not installed).

    Args:
        asked: what `parse_backends` gave: names, or None for every installed
            one (then the second list names the others).
    """
    if asked is not None:
        return list(asked), []
    installed = installed_backends()
    return installed, [n for n in registry.names() if n not in installed]


def versions() -> dict[str, str | None]:
    """Python, platform and the version of every framework (None if absent)."""
    found: dict[str, str | None] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    for framework in registry.frameworks():
        for package in framework.install.versions:
            try:
                found[package] = importlib.metadata.version(package)
            except importlib.metadata.PackageNotFoundError:
                found[package] = None
    return found


def version_line(name: str, found: dict) -> str:
    """'torch 2.13.0+cpu' or 'jax 0.10.2, flax 0.12.8': the packages the
    registry shows of backend `name`, with their versions in `found`."""
    return ", ".join(
        f"{package} {found.get(package)}"
        for package in registry.get(name).install.shown
    )
