"""Input validation shared by all three backends.

Every backend calls these before any compute, so a bad input raises the same
error with the same message in NumPy, PyTorch and JAX. They read only `.shape`
and `.dtype`, never values, so they also run on JAX tracers under `jax.jit`
and on torch tensors under `torch.compile`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")


class Dims(NamedTuple):
    """The sizes of one attention call: batch axes, T, C, H, D."""

    batch: tuple[int, ...]
    T: int
    C: int
    H: int
    D: int


def dtype_name(array) -> str:
    """'float32' for a NumPy, JAX or torch float32 array alike."""
    return str(array.dtype).removeprefix("torch.")


def check_single_head(x, w_q, w_k, w_v, mask=None) -> Dims:
    """Validate the arguments of `single_head_attention`; return their sizes.

    Raises:
        TypeError: x is not an array or not floating point.
        ValueError: anything else that does not fit, with what was expected and
            what was given.
    """
    batch, T, C = _check_x(x)
    D = _check_projections(x, C, w_q=w_q, w_k=w_k, w_v=w_v)
    _check_mask(mask, (*batch, T, T), "(..., T, T)")
    return Dims(batch, T, C, 1, D)


def check_multi_head(x, w_q, w_k, w_v, w_o, n_heads, mask=None) -> Dims:
    """Validate the arguments of `multi_head_attention`; return their sizes.

    Raises:
        TypeError: x is not an array or not floating point.
        ValueError: anything else that does not fit.
    """
    batch, T, C = _check_x(x)
    _check_projections(x, C, w_q=w_q, w_k=w_k, w_v=w_v)
    _check_projections(x, C, w_o=w_o)
    for name, w in (("w_q", w_q), ("w_o", w_o)):
        if tuple(w.shape) != (C, C):
            raise ValueError(
                f"{name} must have shape (C, C) = {(C, C)} for multi-head attention, "
                f"got {tuple(w.shape)}"
            )
    H = check_heads(C, n_heads)
    _check_mask(mask, (*batch, H, T, T), "(..., H, T, T)")
    return Dims(batch, T, C, H, C // H)


def check_heads(d_model: int, n_heads) -> int:
    """n_heads must be a positive int that divides d_model; return it."""
    if isinstance(n_heads, bool) or not isinstance(n_heads, (int, np.integer)):
        raise ValueError(f"n_heads must be a positive integer, got {n_heads!r}")
    if n_heads < 1:
        raise ValueError(f"n_heads must be a positive integer, got {n_heads}")
    if d_model % n_heads:
        raise ValueError(f"n_heads={n_heads} does not divide d_model={d_model}")
    return int(n_heads)


def check_weights(weights) -> None:
    """Validate the argument of `attention_entropy`: a float array of rank >= 1."""
    _check_float(weights, "weights")
    if len(weights.shape) < 1:
        raise ValueError("weights must have rank >= 1 (..., T), got a scalar")


def _check_float(array, name: str) -> str:
    """Raise TypeError unless `array` is a floating-point array; return its dtype."""
    if not (hasattr(array, "shape") and hasattr(array, "dtype")):
        raise TypeError(
            f"{name} must be an array with .shape and .dtype, "
            f"got {type(array).__name__}"
        )
    dtype = dtype_name(array)
    if dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{name} must be a floating-point array ({', '.join(FLOAT_DTYPES)}), "
            f"got dtype {dtype}"
        )
    return dtype


def _check_x(x) -> tuple[tuple[int, ...], int, int]:
    _check_float(x, "x")
    shape = tuple(int(n) for n in x.shape)
    if len(shape) < 2:
        raise ValueError(f"x must have shape (..., T, C) with rank >= 2, got {shape}")
    *batch, T, C = shape
    if T < 1:
        raise ValueError(f"x has T = 0 positions; attention needs T >= 1, got {shape}")
    if C < 1:
        raise ValueError(f"x has C = 0 features; attention needs C >= 1, got {shape}")
    return tuple(batch), T, C


def _check_projections(x, C: int, **weights) -> int:
    """Each weight (C, D) with one D and x's dtype; return D."""
    first_name, first = next(iter(weights.items()))
    for name, w in weights.items():
        if not (hasattr(w, "shape") and hasattr(w, "dtype")):
            raise TypeError(
                f"{name} must be an array with .shape and .dtype, "
                f"got {type(w).__name__}"
            )
        shape = tuple(int(n) for n in w.shape)
        if len(shape) != 2:
            raise ValueError(f"{name} must have rank 2, shape (C, D), got {shape}")
        if shape[0] != C:
            raise ValueError(
                f"{name} must have shape (C, D) with C = {C} (the last axis of x), "
                f"got {shape}"
            )
        if shape != tuple(first.shape):
            raise ValueError(
                f"{name} has shape {shape} but {first_name} has {tuple(first.shape)}; "
                "w_q, w_k and w_v must share one shape (C, D)"
            )
        if dtype_name(w) != dtype_name(x):
            raise ValueError(
                f"x has dtype {dtype_name(x)} but {name} has dtype {dtype_name(w)}; "
                "give x and the weights one dtype"
            )
        if shape[1] < 1:
            raise ValueError(f"{name} must have D >= 1 columns, got {shape}")
    return int(first.shape[1])


def _check_mask(mask, target: tuple[int, ...], legend: str) -> None:
    if mask is None:
        return
    if not (hasattr(mask, "shape") and hasattr(mask, "dtype")):
        raise TypeError(
            f"mask must be a boolean array (True = may attend), "
            f"got {type(mask).__name__}"
        )
    if dtype_name(mask) != "bool":
        raise ValueError(
            f"mask must be a boolean array (True = may attend), "
            f"got dtype {dtype_name(mask)}"
        )
    shape = tuple(int(n) for n in mask.shape)
    try:
        fits = np.broadcast_shapes(shape, target) == target
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(
            f"mask of shape {shape} does not broadcast to {legend} = {target}"
        )
