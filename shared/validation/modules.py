"""The checks of impl_*/module.py: what `from_weights` takes, and a module's
sizes."""

from __future__ import annotations

import dataclasses

import numpy as np

from shared.validation.arrays import as_int, check_positive_int
from shared.validation.attention import (
    MULTI_HEAD_BIASES,
    check_bias_names,
    check_variant_type,
)
from shared.validation.variants import check_head_shapes, check_head_sizes
from shared.variants import ARRAY_FIELDS, Variant


def check_numpy_weights(**arrays) -> dict:
    """The arguments of a module's `from_weights`: NumPy arrays, or None for a
    bias not given; return the arrays given, by name.

    Raises:
        TypeError: an argument that is not a NumPy array; a layer or module
            given instead is told to use `from_layer`.
    """
    given = {name: a for name, a in arrays.items() if a is not None}
    for name, array in given.items():
        if not isinstance(array, np.ndarray):
            layer = callable(array) and not hasattr(array, "shape")
            hint = (
                ": to load another library's layer, use "
                "CausalSelfAttention.from_layer(layer)"
                if layer
                else " in the (in, out) layout (to_numpy converts a framework's array)"
            )
            raise TypeError(
                f"from_weights takes NumPy arrays; {name} is "
                f"{type(array).__name__}{hint}"
            )
    return given


def check_module_sizes(d_model: int, n_heads, variant) -> tuple[int, int, int]:
    """A module's sizes, as `check_head_sizes`'s: (H, D, H_kv), D = the
    variant's head_dim or d_model // H."""
    variant = check_variant_type(variant)
    return check_head_sizes(d_model, n_heads, variant.n_kv_heads, variant.head_dim)


def module_sizes_of(n_heads, w_q, w_k, w_v, w_o, variant, **biases):
    """The variant with n_kv_heads and head_dim read from a module's weights
    (`from_weights`), for those away from plain attention's: as given for
    (C, C) projections. The shapes are then held to them
    (`check_head_shapes`, its messages)."""
    C = w_q.shape[0]
    square = all(getattr(w, "shape", None) == (C, C) for w in (w_q, w_k, w_v, w_o))
    if square:  # plain attention's projections: its own checks follow
        return variant
    H = check_positive_int("n_heads", as_int(n_heads))
    D = w_o.shape[0] // H if w_o.ndim == 2 and w_o.shape[0] >= H else C // H
    H_kv = w_k.shape[1] // D if w_k.ndim == 2 and D else H
    sizes = dict(n_kv_heads=None, head_dim=None)
    if H_kv != H:
        sizes["n_kv_heads"] = H_kv
    if H * D != C or C % H:
        sizes["head_dim"] = D
    variant = dataclasses.replace(variant or Variant(), **sizes)
    given = {n: b for n, b in biases.items() if b is not None}
    check_head_shapes(w_q, C, w_q, w_k, w_v, w_o, H, variant, **given)
    return variant


def check_module_variant(variant, *, with_arrays=False):
    """A module's variant: its choices, arrays stripped, or None for plain
    attention. With `with_arrays` (from_weights), its sinks, q_norm and
    k_norm are taken (they become the module's parameters).

    Raises:
        TypeError: variant not a Variant.
        ValueError: arrays a module does not hold: positions (a call's), and
            without `with_arrays` any array.
    """
    v = check_variant_type(variant)
    taken = ("sinks", "q_norm", "k_norm") if with_arrays else ()
    refused = [name for name in v.arrays if name not in taken]
    if refused:
        raise ValueError(
            f"a module holds the choices of its variant, not {', '.join(refused)}: "
            "its sinks, q_norm and k_norm are parameters (sinks=True, "
            "qk_norm=True, or from_weights(..., variant=...) to load them), and "
            "positions are a call's"
        )
    v = dataclasses.replace(v, **dict.fromkeys(ARRAY_FIELDS))
    return None if v == Variant() else v


def check_from_weights(w_q, w_k, w_v, w_o, n_heads, biases=None, variant=None):
    """The arguments of a module's `from_weights`: NumPy arrays, bias names,
    a variant. Return the arrays given by name (weights, biases, and the
    variant's sinks, q_norm and k_norm), and the module's variant, its
    n_kv_heads and head_dim read from the weights' shapes."""
    biases = check_bias_names(biases, MULTI_HEAD_BIASES)
    arrays = check_variant_type(variant).arrays
    weights = dict(w_q=w_q, w_k=w_k, w_v=w_v, w_o=w_o)
    given = check_numpy_weights(**weights, **biases, **arrays)
    variant = module_sizes_of(n_heads, w_q, w_k, w_v, w_o, variant, **biases)
    return given, check_module_variant(variant, with_arrays=True)
