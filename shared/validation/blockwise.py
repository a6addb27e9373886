"""The checks of impl_*/blockwise.py: per-head q, k, v, the block size, and
the parts of a Variant that a per-head core takes."""

from __future__ import annotations

import dataclasses

from shared.validation.arrays import (
    Dims,
    as_int,
    check_array,
    check_float,
    check_frameworks,
    check_positive_int,
    shape_of,
)
from shared.validation.attention import check_multi_head, check_variant_type
from shared.validation.variants import check_softcap
from shared.variants import CORE_FIELDS

PER_HEAD_CHOICES = CORE_FIELDS
"""What a per-head core's variant may hold: the rest (GQA, rotary positions,
QK-norm) acts on the heads before the core, in the multi-head form."""


def check_block_size(block_size) -> int:
    """block_size must be a positive int; return it."""
    return check_positive_int("block_size", block_size)


def check_workers(workers) -> int:
    """workers (the threads of impl_numpy/tuned.py) must be a positive int."""
    return check_positive_int("workers", workers)


def check_blockwise(q, k, v, block_size, *, framework=None) -> Dims:
    """Validate the arguments of `blockwise_attention`; return their sizes (H = 1).

    Raises:
        TypeError: q, k or v is not a floating-point array.
        ValueError: q, k and v do not share one shape (..., T, D) and one dtype,
            T or D is 0, or block_size is not a positive integer.
    """
    check_frameworks(framework, q=q, k=k, v=v)
    for name, array in (("q", q), ("k", k), ("v", v)):
        check_float(array, name)
    shape = shape_of(q)
    if len(shape) < 2:
        raise ValueError(f"q must have shape (..., T, D) with rank >= 2, got {shape}")
    for name, array in (("k", k), ("v", v)):
        if shape_of(array) != shape:
            raise ValueError(
                f"{name} has shape {tuple(array.shape)} but q has {shape}; "
                "q, k and v must share one shape (..., T, D)"
            )
        check_array(array, name, like=("q", q), together="q, k and v")
    *batch, T, D = shape
    if T < 1:
        raise ValueError(f"q has T = 0 positions; attention needs T >= 1, got {shape}")
    if D < 1:
        raise ValueError(f"q has D = 0 features; attention needs D >= 1, got {shape}")
    check_block_size(block_size)
    return Dims(tuple(batch), T, D, 1, D, 1)


def check_blockwise_variant(
    q, causal, variant, *, framework=None, core="blockwise_attention",
    takes=PER_HEAD_CHOICES,
):  # fmt: skip
    """Validate the variant of a per-head core (`blockwise_attention`; the
    kernels' `flash_attention` names itself and what it `takes`); return it
    with its numbers as Python's, or None for plain attention.

    Raises:
        TypeError: variant not a Variant; an array of another framework.
        ValueError: a choice the core does not take; a window without causal;
            ALiBi without a heads axis; sinks that do not broadcast to q's
            batch axes (...,).
    """
    v = check_variant_type(variant)
    given = [n for n in v.given if n not in takes]
    if given:
        raise ValueError(
            f"{core} takes the variant's {', '.join(takes)}, not "
            f"{', '.join(given)}: the rest acts on the heads before it, as "
            f"multi_head_{core} does"
        )
    check_frameworks(framework, **v.arrays)
    check_window(v.window, causal)
    if v.softcap is not None:
        check_softcap(v.softcap)
    if not isinstance(v.alibi, bool):
        raise ValueError(f"alibi must be True or False, got {v.alibi!r}")
    batch = shape_of(q)[:-2]
    if v.alibi and not batch:
        raise ValueError(
            "alibi gives each head its slope: q must have shape (..., H, T, D)"
        )
    if v.sinks is not None:
        check_float(v.sinks, "sinks")
        check_array(
            v.sinks, "sinks", broadcasts_to=batch,
            where=f"q's batch axes (...,) = {batch}, one per head",
            like=("q", q), together="q and sinks",
        )  # fmt: skip
    if not (v.choices_given or v.arrays):
        return None
    window = None if v.window is None else int(v.window)
    softcap = None if v.softcap is None else float(v.softcap)
    return dataclasses.replace(v, window=window, softcap=softcap)


def check_window(window, causal=True) -> None:
    """window None, or a positive int with causal attention."""
    if window is None:
        return
    check_positive_int("window", as_int(window))
    if not causal:
        raise ValueError(
            "window needs causal=True: a sliding window is the W keys up to each query"
        )


def check_multi_head_blockwise(
    x, w_q, w_k, w_v, w_o, n_heads, block_size, causal, *, biases=None,
    variant=None, framework=None,
):  # fmt: skip
    """Validate the arguments of `multi_head_blockwise_attention`: as
    `check_multi_head`, a block size, and a window only with causal. Return
    the sizes and the variant, or None for plain attention."""
    dims, variant = check_multi_head(
        x, w_q, w_k, w_v, w_o, n_heads, biases=biases, variant=variant,
        framework=framework,
    )  # fmt: skip
    check_block_size(block_size)
    check_window(getattr(variant, "window", None), causal)
    return dims, variant
