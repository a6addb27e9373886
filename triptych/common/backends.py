"""Loading the backends by name, with a one-line message when one is missing;
what `triptych run`, `lab` and `grad` take on the command line (`--backends`,
`--dtype`)."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import platform

from shared.protocol import Backend
from triptych.common.errors import CommandError

BACKENDS = ("numpy", "torch", "jax")
DTYPES = ("float32", "float64")
"""The dtypes of `triptych run`, `lab` and `grad`. `triptych bench --dtype` also
takes the half precisions (every name of `shared.dtypes.FLOAT_DTYPES`)."""


class BackendMissingError(CommandError):
    """A backend was asked for but its framework is not installed."""


def load_backend(name: str) -> Backend:
    """The module impl_<name> (it keeps `shared.protocol.Backend`), or one clear
    line if its framework is missing. Loading "jax" turns on JAX's 64-bit mode
    for this process (docs/contract.md#float64-in-jax).

    Raises:
        ValueError: `name` is not one of BACKENDS.
        BackendMissingError: its framework is not installed.
    """
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose from {', '.join(BACKENDS)}")
    try:
        module = importlib.import_module(f"impl_{name}")
    except ImportError as error:
        raise BackendMissingError(
            f"backend {name!r} is not installed ({error.name or error}): "
            + install_command(name)
        ) from None
    if name == "jax":
        # A program's choice, made here for triptych's: every command compares
        # float64 with the float64 oracle, and impl_jax changes no setting.
        import jax

        jax.config.update("jax_enable_x64", True)
    return module


PACKAGES = {"numpy": ("numpy",), "torch": ("torch",), "jax": ("jax", "flax")}
"""The packages each backend's impl_<name> imports (impl_jax: flax too)."""


def missing_package(backend: str) -> str | None:
    """The first package `backend` needs that is not installed, or None;
    found without importing anything."""
    return next(
        (p for p in PACKAGES[backend] if importlib.util.find_spec(p) is None), None
    )


def install_command(extra: str) -> str:
    """The pip command that installs this package with the extra `extra`."""
    return f'pip install "attention-triptych[{extra}]"'


def not_installed_line(names: list[str]) -> str:
    """The line a command prints for the backends "all" left out."""
    return "not installed, so not run: " + ", ".join(
        f"{name} ({install_command(name)})" for name in names
    )


def installed_backends() -> list[str]:
    """The backends that import here, in the order of BACKENDS."""
    found = []
    for name in BACKENDS:
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
    for name in names:
        if name not in BACKENDS:
            raise argparse.ArgumentTypeError(
                f"unknown backend {name!r}; choose from {', '.join(BACKENDS)} or all"
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
    return installed, [n for n in BACKENDS if n not in installed]


def versions() -> dict[str, str | None]:
    """Python, platform and the version of every framework (None if absent)."""
    found: dict[str, str | None] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    for package in ("numpy", "torch", "jax", "jaxlib", "flax"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = None
    return found
