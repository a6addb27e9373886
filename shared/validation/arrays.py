"""The checks every other one is built of: an argument is an array of this
framework, of this kind of dtype, of this shape, in x's dtype (`check_array`);
an integer or a number that must be positive; the sizes a check returns.

They read only `.shape`, `.dtype` and the array's type, never values, so they
also run on JAX tracers under `jax.jit` and on torch's fake tensors under
`torch.compile`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from shared import registry
from shared.dtypes import FLOAT_DTYPES, dtype_name

INTEGER_DTYPES = tuple(
    f"{sign}int{bits}" for sign in ("", "u") for bits in (8, 16, 32, 64)
)


class Dims(NamedTuple):
    """The sizes of one attention call: batch axes, T, C, H, D, and H_kv, the
    key/value heads (H unless the variant groups them)."""

    batch: tuple[int, ...]
    T: int
    C: int
    H: int
    D: int
    H_kv: int


def check_array(
    array,
    name: str,
    *,
    dtype: str = "any",
    what: str = "",
    shape: tuple[int, ...] | None = None,
    legend: str = "",
    broadcasts_to: tuple[int, ...] | None = None,
    where: str = "",
    like=None,
    together: str = "",
) -> tuple[int, ...]:
    """The one check of an array argument, each part if asked; return its shape.

    Args:
        dtype: "any"; "float" (a TypeError names the float dtypes); or "bool"
            or "integer", `what` naming what it must be ("a boolean array
            (True = may attend)"): TypeError if not an array, ValueError if of
            another dtype.
        shape, legend: the exact shape, written `legend` ("(H,)") in the message.
        broadcasts_to, where: a shape it must broadcast to, and the words for
            it ("(..., T, T) = (2, 5, 5)").
        like, together: (name, array) whose dtype it must have, and the words
            for what shares it ("x and the weights").

    Raises:
        TypeError: not an array; not floating point, where it must be.
        ValueError: anything else that does not fit.
    """
    if not (hasattr(array, "shape") and hasattr(array, "dtype")):
        must = what or "an array with .shape and .dtype"
        raise TypeError(f"{name} must be {must}, got {type(array).__name__}")
    found = dtype_name(array)
    if dtype == "float" and found not in FLOAT_DTYPES:
        raise TypeError(
            f"{name} must be a floating-point array ({', '.join(FLOAT_DTYPES)}), "
            f"got dtype {found}"
        )
    wanted = {"bool": ("bool",), "integer": INTEGER_DTYPES}.get(dtype)
    if wanted is not None and found not in wanted:
        raise ValueError(f"{name} must be {what}, got dtype {found}")
    got = shape_of(array)
    if shape is not None and got != tuple(shape):
        raise ValueError(f"{name} must have shape {legend} = {tuple(shape)}, got {got}")
    if broadcasts_to is not None and not broadcasts(got, broadcasts_to):
        raise ValueError(f"{name} of shape {got} does not broadcast to {where}")
    if like is not None and found != dtype_name(like[1]):
        raise ValueError(
            f"{like[0]} has dtype {dtype_name(like[1])} but {name} has dtype "
            f"{found}; give {together} one dtype"
        )
    return got


def shape_of(array) -> tuple[int, ...]:
    """The shape as a tuple of Python ints (a torch.Size or a tracer's too)."""
    return tuple(int(n) for n in array.shape)


def broadcasts(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether `shape` broadcasts to `target` without changing it."""
    try:
        return np.broadcast_shapes(shape, target) == tuple(target)
    except ValueError:
        return False


def check_float(array, name: str) -> str:
    """Raise TypeError unless `array` is a floating-point array; return its dtype."""
    check_array(array, name, dtype="float")
    return dtype_name(array)


def check_positive_int(name: str, value) -> int:
    """Raise ValueError unless `value` is a positive int (not a bool); return it."""
    if not isinstance(value, (int, np.integer)) and hasattr(value, "shape"):
        how = (
            f'under jax.jit, mark it static: jax.jit(f, static_argnames=("{name}",)), '
            "or call the _jit twin of the function (e.g. multi_head_attention_jit)"
            if traced(value)
            else f"pass int({name})"
        )
        raise ValueError(
            f"{name} must be a Python int, known before any compute, got an array "
            f"{value!r}; {how}"
        )
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def traced(value) -> bool:
    """Whether `value` is an array of a framework whose compile step traces
    (a JAX array here is most often a traced argument of jax.jit)."""
    kind = registry.framework_of(value)
    compiler = None if kind is None else registry.get(kind).compiler
    return compiler is not None and compiler.traces


def as_int(value):
    """A NumPy integer as a Python int (named by its value in a message)."""
    return int(value) if isinstance(value, np.integer) else value


def check_positive_number(name: str, value, what: str) -> None:
    """Raise ValueError unless `value` is a finite number above 0; `what` it is."""
    number = isinstance(value, (int, float, np.integer, np.floating))
    if isinstance(value, bool) or not number or not 0 < value < float("inf"):
        raise ValueError(f"{name} must be a positive number ({what}), got {value!r}")


def framework_of(array) -> str | None:
    """The backend whose array `array` is (a JAX tracer and a torch fake
    tensor included), else None: shared.registry's. Reads only its type."""
    return registry.framework_of(array)


def check_frameworks(framework: str | None, **arrays) -> None:
    """Raise TypeError for an array that `framework` does not compute on (None:
    any array is taken): one framework per call, each backend computing on
    its own arrays (JAX on NumPy arrays too, as jax.numpy does), and naming
    the converter for any other (shared.registry)."""
    if framework is None:
        return
    own = registry.get(framework)
    for name, array in arrays.items():
        kind = registry.framework_of(array)
        if kind is not None and kind not in (framework, *own.arrays.computes_on):
            convert = registry.conversion(name, have=kind, want=framework)
            raise TypeError(
                f"{name} is {registry.get(kind).arrays.word}, but impl_{framework} "
                f"computes on {own.arrays.word.partition(' ')[2]}s: convert it "
                f"with {convert}"
            )
