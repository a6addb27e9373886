"""The variants of modern attention, backend-neutral: the one value that
carries them (`Variant`), rotary positions' settings and frequencies, ALiBi's
slopes (docs/variants.md).

Each backend's impl_*/variants.py computes with these; the float64 oracle
(shared/reference.py) with the same definitions, looped.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import numpy as np

ROTARY_STYLES = ("neox", "gptj")
"""How rotary positions pair the features of a head: "neox" pairs feature m
with m + R/2 (rotate halves: transformers' `rotate_half`, Llama, Qwen, Mistral,
Gemma), "gptj" pairs 2m with 2m + 1 (interleaved: GPT-J, FlashAttention's
`interleaved=True`)."""


class Rotary(NamedTuple):
    """Rotary positions (RoPE), as `Variant(rotary=...)` takes them.

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


QK_NORM_EPS = 1e-6
"""RMSNorm's eps on q and k by default (Qwen 3's `rms_norm_eps`)."""


@dataclasses.dataclass(frozen=True, eq=False)
class Variant:
    """The options of modern attention, as one value (docs/variants.md): the
    static choices, which decide shapes and branches, beside the arrays that
    are data. `Variant()` is plain attention.

    Attributes:
        n_kv_heads: H_kv key/value heads (GQA; MQA when 1), None: H.
        head_dim: D when it is not C // H.
        rotary: a Rotary: q and k turned by their positions.
        window: W: key j reaches query i only if i - W < j.
        alibi: add ALiBi's slope_h * (j - i) to the scaled scores.
        softcap: c: each scaled score s becomes c * tanh(s / c).
        qk_norm_eps: RMSNorm's eps of q_norm and k_norm.
        positions: None (row i at position i), or integers broadcastable to
            x's (..., T): the rotary positions.
        sinks: (H,): each head's logit in the softmax's denominator.
        q_norm, k_norm: (D,): RMSNorm's weights on each head's q and k.
    """

    n_kv_heads: int | None = None
    head_dim: int | None = None
    rotary: Rotary | None = None
    window: int | None = None
    alibi: bool = False
    softcap: float | None = None
    qk_norm_eps: float = QK_NORM_EPS
    positions: Any = None
    sinks: Any = None
    q_norm: Any = None
    k_norm: Any = None

    @property
    def choices(self) -> tuple:
        """The static choices, hashable: what `jax.jit` keeps static."""
        return tuple(getattr(self, name) for name in STATIC_FIELDS)

    @property
    def choices_given(self) -> tuple[str, ...]:
        """The names of the static choices away from plain attention's."""
        plain = Variant()
        return tuple(n for n in STATIC_FIELDS if getattr(self, n) != getattr(plain, n))

    @property
    def arrays(self) -> dict:
        """The arrays given, by name (none: {})."""
        found = {name: getattr(self, name) for name in ARRAY_FIELDS}
        return {name: a for name, a in found.items() if a is not None}

    @property
    def given(self) -> tuple[str, ...]:
        """The names of the fields away from plain attention's: the choices
        that differ from `Variant()`'s and the arrays given."""
        return (*self.choices_given, *self.arrays)

    def for_core(self, *, grouped=False) -> Variant | None:
        """The fields a per-head core applies to its scores (CORE_FIELDS: the
        window, ALiBi, soft-capping, sinks), and with `grouped` its n_kv_heads
        (for a core that reads each key/value head in place, as the flash
        kernels do); QK-norm and rotary positions act on the heads before it.
        None when there are none."""
        fields = {name: getattr(self, name) for name in CORE_FIELDS}
        if grouped:
            fields["n_kv_heads"] = self.n_kv_heads
        core = Variant(**fields)
        return None if core == Variant() else core

    def groups(self, n_heads: int) -> int:
        """G = H / H_kv, the query heads that read one key/value head."""
        return n_heads // (self.n_kv_heads or n_heads)

    def slopes(self, n_heads: int) -> tuple[float, ...] | None:
        """ALiBi's slope of each of the H heads, or None without ALiBi."""
        return alibi_slopes(n_heads) if self.alibi else None

    def __eq__(self, other):
        """The same choices and the very same arrays (arrays are not compared
        by value: `==` of two arrays is an array)."""
        if not isinstance(other, Variant):
            return NotImplemented
        same = all(getattr(self, n) is getattr(other, n) for n in ARRAY_FIELDS)
        return self.choices == other.choices and same

    def __hash__(self):
        return hash((self.choices, *(id(getattr(self, n)) for n in ARRAY_FIELDS)))


STATIC_FIELDS = (
    "n_kv_heads", "head_dim", "rotary", "window", "alibi", "softcap", "qk_norm_eps",
)  # fmt: skip
"""The fields of a Variant that decide a shape or a branch."""
ARRAY_FIELDS = ("positions", "sinks", "q_norm", "k_norm")
"""The fields of a Variant that hold arrays: data, traced under `jax.jit`."""
CORE_FIELDS = ("window", "alibi", "softcap", "sinks")
"""The fields of a Variant that a per-head core applies to its scores; the
rest (GQA, head_dim, rotary positions, QK-norm) act on the heads before the
core, in the multi-head shell. A new variant that acts on the scores joins
this tuple, and every per-head core takes it or refuses it by name."""
