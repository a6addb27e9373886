"""The checks of impl_*/attention.py (and of backward.py, which takes the same
arguments): single- and multi-head attention, entropy, key-padding masks."""

from __future__ import annotations

from shared.dtypes import dtype_name
from shared.validation.arrays import (
    INTEGER_DTYPES,
    Dims,
    check_array,
    check_float,
    check_frameworks,
    check_positive_int,
    shape_of,
)
from shared.validation.variants import check_head_shapes, check_heads, check_variant

SINGLE_HEAD_BIASES = ("b_q", "b_k", "b_v")
MULTI_HEAD_BIASES = ("b_q", "b_k", "b_v", "b_o")


def check_single_head(
    x, w_q, w_k, w_v, mask=None, *, biases=None, framework=None
) -> Dims:
    """Validate the arguments of `single_head_attention`; return their sizes.

    Args:
        biases: None, or a dict of b_q, b_k, b_v, each None or (D,).
        framework: the caller's ("numpy", "torch" or "jax"): an array of
            another framework is a TypeError (None: any array).

    Raises:
        TypeError: x is not an array or not floating point, an array of
            another framework, or biases not a dict.
        ValueError: anything else that does not fit, with what was expected and
            what was given.
    """
    biases = check_bias_names(biases, SINGLE_HEAD_BIASES)
    arrays = dict(x=x, w_q=w_q, w_k=w_k, w_v=w_v, mask=mask, **biases)
    check_frameworks(framework, **arrays)
    batch, T, C = check_x(x)
    D = check_projections(x, C, w_q=w_q, w_k=w_k, w_v=w_v)
    check_biases(x, D, "(D,)", **biases)
    check_mask(mask, (*batch, T, T), "(..., T, T)")
    return Dims(batch, T, C, 1, D, 1)


def check_multi_head(
    x, w_q, w_k, w_v, w_o, n_heads, mask=None, *, biases=None, variant=None,
    framework=None,
):  # fmt: skip
    """Validate the arguments of `multi_head_attention`; return their sizes and
    the variant, or None for plain attention (`check_variant`).

    Args:
        biases: None, or a dict of b_q, b_k, b_v, b_o, each None or (C,)
            (with GQA or a head width of its own, each its projection's
            columns: b_q (H * D,), b_k and b_v (H_kv * D,)).
        variant: None, or a shared.variants.Variant.
        framework: as for `check_single_head`.

    Raises:
        TypeError: x is not an array or not floating point, an array of
            another framework, biases not a dict or variant not a Variant.
        ValueError: anything else that does not fit.
    """
    biases = check_bias_names(biases, MULTI_HEAD_BIASES)
    arrays = dict(x=x, w_q=w_q, w_k=w_k, w_v=w_v, w_o=w_o, mask=mask, **biases)
    check_frameworks(framework, **arrays)
    sizes = check_variant_type(variant)
    batch, T, C = check_x(x)
    weights = (w_q, w_k, w_v, w_o)
    H, D, H_kv = check_multi_head_weights(x, C, weights, n_heads, sizes, biases)
    check_mask(mask, (*batch, H, T, T), "(..., H, T, T)")
    dims = Dims(batch, T, C, H, D, H_kv)
    return dims, check_variant(variant, x, dims, (*batch, T), framework=framework)


def check_multi_head_weights(x, C, weights, n_heads, sizes, biases):
    """The four projections and the biases of multi-head attention on x (its
    last axis C), and n_heads: (C, C) each, or with the variant's n_kv_heads
    or head_dim (`sizes`) their shapes (`check_head_shapes`). Return (H, D,
    H_kv)."""
    if sizes.n_kv_heads is not None or sizes.head_dim is not None:
        return check_head_shapes(x, C, *weights, n_heads, sizes, **biases)
    w_q, w_k, w_v, w_o = weights
    check_projections(x, C, "(C, C)", w_q=w_q, w_k=w_k, w_v=w_v)
    check_projections(x, C, "(C, C)", w_o=w_o)
    check_square(C, w_q=w_q, w_o=w_o)
    check_biases(x, C, "(C,)", **biases)
    H = check_heads(C, n_heads)
    return H, C // H, H


def check_variant_type(variant):
    """variant None or a Variant; return it, or Variant() for None."""
    from shared.variants import Variant

    if variant is None:
        return Variant()
    if not isinstance(variant, Variant):
        raise TypeError(
            "variant must be None or a Variant(...) (from shared import Variant), "
            f"got {type(variant).__name__}"
        )
    return variant


def check_bias_names(biases, names: tuple[str, ...]) -> dict:
    """biases None or a dict of some of `names`; return those not None."""
    if biases is None:
        return {}
    if not isinstance(biases, dict):
        raise TypeError(
            f"biases must be None or a dict of {', '.join(names)} (each None or an "
            f"array), got {type(biases).__name__}"
        )
    unknown = [name for name in biases if name not in names]
    if unknown:
        raise ValueError(
            f"biases has {unknown[0]!r}, which is not one of {', '.join(names)}"
        )
    return {name: b for name, b in biases.items() if b is not None}


def check_x(x) -> tuple[tuple[int, ...], int, int]:
    """x a float array (..., T, C), T and C at least 1; return batch, T, C."""
    check_float(x, "x")
    shape = shape_of(x)
    if len(shape) < 2:
        raise ValueError(f"x must have shape (..., T, C) with rank >= 2, got {shape}")
    *batch, T, C = shape
    if T < 1:
        raise ValueError(f"x has T = 0 positions; attention needs T >= 1, got {shape}")
    if C < 1:
        raise ValueError(f"x has C = 0 features; attention needs C >= 1, got {shape}")
    return tuple(batch), T, C


def check_projections(x, C: int, legend: str = "(C, D)", **weights) -> int:
    """Each weight `legend`, (C, D) with one D, in x's dtype; return D.
    Multi-head attention's legend is (C, C)."""
    first_name, first = next(iter(weights.items()))
    for name, w in weights.items():
        shape = check_array(w, name)
        if len(shape) != 2:
            raise ValueError(f"{name} must have rank 2, shape {legend}, got {shape}")
        if shape[0] != C:
            raise ValueError(
                f"{name} must have shape {legend} with C = {C} (the last axis of x), "
                f"got {shape}"
            )
        if shape != tuple(first.shape):
            raise ValueError(
                f"{name} has shape {shape} but {first_name} has {tuple(first.shape)}; "
                f"w_q, w_k and w_v must share one shape {legend}"
            )
        check_array(w, name, like=("x", x), together="x and the weights")
        if shape[1] < 1:
            raise ValueError(f"{name} must have D >= 1 columns, got {shape}")
    return int(first.shape[1])


def check_square(C: int, **weights) -> None:
    """Each weight (C, C), as multi-head attention needs."""
    for name, w in weights.items():
        if tuple(w.shape) != (C, C):
            raise ValueError(
                f"{name} must have shape (C, C) = {(C, C)} for multi-head attention, "
                f"got {tuple(w.shape)}"
            )


def check_biases(x, size: int, legend: str, **biases) -> None:
    """Each bias None, or a vector of `size` in x's dtype."""
    check_vectors(x, size, legend, "x, the weights and the biases", **biases)


def check_vectors(x, size: int, legend: str, together: str = "", **vectors) -> None:
    """Each vector None, or of shape (size,) in x's dtype; `together` names
    what must share it in the message (default: x and the vector)."""
    for name, a in vectors.items():
        if a is not None:
            check_array(
                a, name, shape=(size,), legend=legend, like=("x", x),
                together=together or f"x and {name}",
            )  # fmt: skip


def check_mask(mask, target: tuple[int, ...], legend: str) -> None:
    """None, or a boolean mask that broadcasts to `target`, written `legend`."""
    if mask is not None:
        check_array(
            mask, "mask", dtype="bool", what="a boolean array (True = may attend)",
            broadcasts_to=target, where=f"{legend} = {target}",
        )  # fmt: skip


def check_d_out(
    d_out, x, out_shape: tuple[int, ...], legend: str, *, framework=None
) -> None:
    """Validate the upstream gradient of a backward function: an array with
    out's shape (`out_shape`, written `legend`, e.g. "(..., T, D)") and x's dtype.

    Called after the forward's own check, which gives `out_shape`.

    Raises:
        TypeError: d_out is not an array.
        ValueError: d_out's shape is not out's, or its dtype is not x's.
    """
    check_frameworks(framework, d_out=d_out)
    shape = check_array(d_out, "d_out")
    if shape != tuple(out_shape):
        raise ValueError(
            f"d_out must have the shape of out, {legend} = {tuple(out_shape)}, "
            f"got {shape}"
        )
    check_array(d_out, "d_out", like=("x", x), together="x and d_out")


def check_weights(weights, *, framework=None) -> None:
    """Validate the argument of `attention_entropy`: a float array of rank >= 1."""
    check_frameworks(framework, weights=weights)
    check_float(weights, "weights")
    if len(weights.shape) < 1:
        raise ValueError("weights must have rank >= 1 (..., T), got a scalar")


def check_key_padding(lengths_or_keep, T, *, framework=None) -> str:
    """Validate the arguments of `key_padding_mask`; return "lengths" or "keep".

    Shapes and dtypes only (values are never read, so it runs under `jax.jit`):
    integer lengths of any shape (...,), or a boolean keep array (..., T).

    Raises:
        TypeError: lengths_or_keep is not an array, or neither integer nor bool.
        ValueError: T is not a positive integer, or a keep array's last axis
            is not T.
    """
    check_frameworks(framework, lengths_or_keep=lengths_or_keep)
    check_positive_int("T", T)
    what = "an array of integer lengths (...,) or a boolean keep array (..., T)"
    shape = check_array(lengths_or_keep, "lengths_or_keep", what=what)
    dtype = dtype_name(lengths_or_keep)
    if dtype == "bool":
        if not shape or shape[-1] != T:
            raise ValueError(
                f"a boolean keep array must have shape (..., T) with T = {T}, "
                f"got {shape}"
            )
        return "keep"
    if dtype in INTEGER_DTYPES:
        return "lengths"
    raise TypeError(f"lengths_or_keep must be {what}, got dtype {dtype}")
