"""The checks of impl_*/variants.py: a Variant's choices and arrays, and the
head counts and projection shapes that grouped-query attention and a head
width of its own give (docs/variants.md)."""

from __future__ import annotations

import dataclasses

from shared.validation.arrays import (
    as_int,
    check_array,
    check_frameworks,
    check_positive_int,
    check_positive_number,
)
from shared.variants import QK_NORM_EPS, ROTARY_STYLES, Rotary, Variant, rotary_width


def check_heads(d_model: int, n_heads) -> int:
    """n_heads must be a positive int that divides d_model; return it."""
    n_heads = check_positive_int("n_heads", as_int(n_heads))
    if d_model % n_heads:
        raise ValueError(f"n_heads={n_heads} does not divide d_model={d_model}")
    return n_heads


def check_kv_heads(n_heads: int, n_kv_heads) -> int:
    """n_kv_heads a positive int that divides n_heads (None: n_heads); return it."""
    if n_kv_heads is None:
        return n_heads
    n_kv_heads = check_positive_int("n_kv_heads", as_int(n_kv_heads))
    if n_heads % n_kv_heads:
        raise ValueError(
            f"n_heads={n_heads} is not a multiple of n_kv_heads={n_kv_heads}: "
            "each key/value head serves n_heads / n_kv_heads query heads"
        )
    return n_kv_heads


def check_head_sizes(C: int, n_heads, n_kv_heads, head_dim) -> tuple[int, int, int]:
    """(H, D, H_kv): D = head_dim, or C // H (then H must divide C)."""
    if head_dim is None:
        H = check_heads(C, n_heads)
        D = C // H
    else:
        H = check_positive_int("n_heads", as_int(n_heads))
        D = check_positive_int("head_dim", as_int(head_dim))
    return H, D, check_kv_heads(H, n_kv_heads)


def check_head_shapes(
    x, C: int, w_q, w_k, w_v, w_o, n_heads, variant: Variant, **biases
) -> tuple[int, int, int]:
    """The projections' shapes with the variant's n_kv_heads (GQA) or
    head_dim: w_q (C, H * D), w_k and w_v (C, H_kv * D), w_o (H * D, C), and
    the biases to match. Return (H, D, H_kv)."""
    H, D, H_kv = check_head_sizes(C, n_heads, variant.n_kv_heads, variant.head_dim)
    expected = {
        "w_q": ((C, H * D), "(C, H * D)"),
        "w_k": ((C, H_kv * D), "(C, n_kv_heads * D)"),
        "w_v": ((C, H_kv * D), "(C, n_kv_heads * D)"),
        "w_o": ((H * D, C), "(H * D, C)"),
    }
    for name, w in (("w_q", w_q), ("w_k", w_k), ("w_v", w_v), ("w_o", w_o)):
        shape, legend = expected[name]
        if check_array(w, name) != shape:
            raise ValueError(
                f"{name} must have shape {legend} = {shape} for n_heads={H}, "
                f"n_kv_heads={H_kv}, head width D = {D}, got {tuple(w.shape)}"
            )
        check_array(w, name, like=("x", x), together="x and the weights")
    sizes = {"b_q": (H * D, "(H * D,)"), "b_o": (C, "(C,)")}
    for name, b in biases.items():
        size, legend = sizes.get(name, (H_kv * D, "(n_kv_heads * D,)"))
        check_array(
            b, name, shape=(size,), legend=legend, like=("x", x),
            together="x, the weights and the biases",
        )  # fmt: skip
    return H, D, H_kv


def check_variant(variant, x, dims, rows: tuple[int, ...], *, framework=None):
    """Validate a Variant (None or Variant(): plain attention) against the
    sizes `dims` of its call (H, D, H_kv checked already); return it with its
    numbers as Python's, or None when it is plain attention.

    Args:
        rows: the shape of x without its last axis, (..., T) (for decoding,
            x_t's (...,)): what `positions` must broadcast to.

    Raises:
        TypeError: rotary not a Rotary; an array that is not one, or of
            another framework.
        ValueError: anything else that does not fit, before any compute.
    """
    if variant is None:
        return None
    v = variant
    check_frameworks(framework, **v.arrays)
    if v.rotary is not None:
        check_rotary(v.rotary, dims.D)
    if v.positions is not None:
        check_positions(v.positions, v.rotary, rows)
    if v.window is not None:
        check_positive_int("window", as_int(v.window))
    if not isinstance(v.alibi, bool):
        raise ValueError(f"alibi must be True or False, got {v.alibi!r}")
    if v.softcap is not None:
        check_softcap(v.softcap)
    for name, size, legend in (
        ("sinks", dims.H, "(H,)"),
        ("q_norm", dims.D, "(D,)"),
        ("k_norm", dims.D, "(D,)"),
    ):
        if getattr(v, name) is not None:
            check_array(
                getattr(v, name), name, shape=(size,), legend=legend,
                like=("x", x), together=f"x and {name}",
            )  # fmt: skip
    check_positive_number("qk_norm_eps", v.qk_norm_eps, "RMSNorm's eps")
    if v.qk_norm_eps != QK_NORM_EPS and v.q_norm is None and v.k_norm is None:
        raise ValueError(
            "qk_norm_eps is the eps of q_norm and k_norm, and neither is given"
        )
    if dataclasses.replace(v, head_dim=None) == Variant():  # head_dim: a shape only
        return None
    return dataclasses.replace(
        v,
        n_kv_heads=None if v.n_kv_heads is None else dims.H_kv,
        head_dim=None if v.head_dim is None else dims.D,
        window=None if v.window is None else int(v.window),
        softcap=None if v.softcap is None else float(v.softcap),
        qk_norm_eps=float(v.qk_norm_eps),
    )


def check_softcap(softcap) -> None:
    """softcap a positive number."""
    what = "scores are capped to (-softcap, softcap)"
    check_positive_number("softcap", softcap, what)


def check_rotary(rotary, D: int) -> int:
    """rotary a Rotary that fits a head of width D; return R, the width it turns."""
    if not isinstance(rotary, Rotary):
        raise TypeError(
            "rotary must be None or a Rotary(base, style, fraction) (from shared "
            f"import Rotary), got {type(rotary).__name__}"
        )
    if rotary.style not in ROTARY_STYLES:
        raise ValueError(
            "rotary style must be 'neox' (rotate halves) or 'gptj' (interleaved "
            f"pairs), got {rotary.style!r}"
        )
    check_positive_number("rotary base", rotary.base, "theta")
    fraction = rotary.fraction
    if (
        isinstance(fraction, bool)
        or not isinstance(fraction, (int, float))
        or not (0 < fraction <= 1)
    ):
        raise ValueError(
            f"rotary fraction must be a number in (0, 1], the part of the head "
            f"width turned, got {fraction!r}"
        )
    R = rotary_width(D, fraction)
    if R < 2 or R % 2:
        raise ValueError(
            f"rotary positions turn pairs of features: fraction {fraction} of the "
            f"head width D = {D} gives R = {R}, which must be even and at least 2"
        )
    return R


def check_positions(positions, rotary, rows: tuple[int, ...]) -> None:
    """Integer rotary positions that broadcast to `rows`, with a rotary."""
    if rotary is None:
        raise ValueError(
            "positions are the rotary positions of x's rows: give rotary=Rotary(...) "
            "with them"
        )
    check_array(
        positions, "positions", dtype="integer", what="an integer array",
        broadcasts_to=rows,
        where=f"x's shape without its last axis, {tuple(rows)}",
    )  # fmt: skip
