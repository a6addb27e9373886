"""The numbers behind the variants of modern attention, backend-neutral:
rotary positions' settings and frequencies, ALiBi's slopes (docs/variants.md).

Each backend's impl_*/variants.py computes with these; the float64 oracle
(shared/reference.py) with the same definitions, looped.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

ROTARY_STYLES = ("neox", "gptj")
"""How rotary positions pair the features of a head: "neox" pairs feature m
with m + R/2 (rotate halves: transformers' `rotate_half`, Llama, Qwen, Mistral,
Gemma), "gptj" pairs 2m with 2m + 1 (interleaved: GPT-J, FlashAttention's
`interleaved=True`)."""


class Rotary(NamedTuple):
    """Rotary positions (RoPE), as `rotary=` takes them.

    Attributes:
        base: theta; the pair m of R rotated features turns by the angle
            position * base ** (-2m / R) (transformers' `rope_theta`).
        style: "neox" or "gptj" (ROTARY_STYLES).
        fraction: the part of the head width D rotated, R = int(fraction * D)
            features from the first (transformers' `partial_rotary_factor`);
            the rest pass unrotated.
    """

    base: float = 10000.0
    style: str = "neox"
    fraction: float = 1.0


def rotary_width(D: int, fraction: float) -> int:
    """R = int(fraction * D), the features of a head that rotary positions turn."""
    return int(fraction * D)


def inverse_frequencies(R: int, base: float) -> np.ndarray:
    """(R // 2,) float64: base ** (-2m / R), the angle per position of pair m."""
    return base ** (-np.arange(0, R, 2, dtype=np.float64) / R)


def alibi_slopes(n_heads: int) -> tuple[float, ...]:
    """ALiBi's slope of each head (Press et al. 2022): 2 ** (-8 (h + 1) / H).

    For H not a power of two: the slopes of the power of two P just below H,
    then every other slope of 2P (its 1st, 3rd, ...) for the H - P heads left,
    which fall between those of P.
    """
    P = 2 ** math.floor(math.log2(n_heads))
    slopes = [2.0 ** (-8.0 * (h + 1) / P) for h in range(P)]
    between = [2.0 ** (-8.0 * (h + 1) / (2 * P)) for h in range(0, 2 * P, 2)]
    return tuple(slopes + between[: n_heads - P])


def variant_options(n_kv_heads, head_dim, rotary, window, alibi, softcap, eps):
    """A module's variant settings away from their defaults, by keyword
    (impl_*/module.py): what it passes to every call."""
    found = dict(
        n_kv_heads=n_kv_heads, head_dim=head_dim, rotary=rotary, window=window,
        softcap=softcap,
    )  # fmt: skip
    found = {n: v for n, v in found.items() if v is not None}
    if alibi:
        found["alibi"] = alibi
    if eps != 1e-6:  # shared.validation.QK_NORM_EPS
        found["qk_norm_eps"] = eps
    return found


def cache_options(options):
    """The settings of `init_kv_cache` among a module's options."""
    return {n: options[n] for n in ("n_kv_heads", "head_dim", "window") if n in options}
