"""Loading the backends by name, with a one-line message when one is missing."""

from __future__ import annotations

import importlib
import importlib.metadata
import platform
from types import ModuleType

BACKENDS = ("numpy", "torch", "jax")


class BackendMissingError(RuntimeError):
    """A backend was asked for but its framework is not installed."""


def load_backend(name: str) -> ModuleType:
    """The module impl_<name>, or one clear line if its framework is missing.

    Raises:
        ValueError: `name` is not one of BACKENDS.
        BackendMissingError: its framework is not installed.
    """
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose from {', '.join(BACKENDS)}")
    try:
        return importlib.import_module(f"impl_{name}")
    except ImportError as error:
        raise BackendMissingError(
            f"backend {name!r} is not installed ({error.name or error}): "
            f'pip install "attention-triptych[{name}]"'
        ) from None


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
