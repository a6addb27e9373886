"""Seeded inputs and parameters: made once here in float64, cast by each backend.

Everything comes from one `numpy.random.default_rng(preset.seed)`, drawn in a
fixed order (w_q, w_k, w_v, w_o, then the inputs), so a preset always gives the
same numbers. No backend draws from its own framework's generator on the
cross-check path.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from shared.config import Preset
from shared.variants import Variant


@dataclass(frozen=True)
class Fixture:
    """Inputs and parameters for one preset, all in one dtype (float64 by default).

    Attributes:
        preset: the preset they were made from.
        x: (*batch, T, C) inputs: token embeddings plus sinusoidal positions for
            the toy sentence, standard normal otherwise.
        w_q, w_k, w_v, w_o: (C, C) projections in the (in, out) layout, entries
            N(0, 1/C), so q and k entries are about unit size and so are scores.
        b_q, b_k, b_v, b_o: (C,) biases, or None: a preset has none; a real
            layer's (`triptych run --checkpoint`) may.
        variant: a real layer's Variant (docs/variants.md: n_kv_heads,
            head_dim, rotary, window, ...), with w_q (C, H * D), w_k and w_v
            (C, H_kv * D), w_o (H * D, C); None for plain attention.
    """

    preset: Preset
    x: np.ndarray
    w_q: np.ndarray
    w_k: np.ndarray
    w_v: np.ndarray
    w_o: np.ndarray
    b_q: np.ndarray | None = None
    b_k: np.ndarray | None = None
    b_v: np.ndarray | None = None
    b_o: np.ndarray | None = None
    variant: Variant | None = None

    @property
    def params(self) -> dict[str, np.ndarray]:
        """The four projections by name, in the order the contract takes them."""
        return {"w_q": self.w_q, "w_k": self.w_k, "w_v": self.w_v, "w_o": self.w_o}

    @property
    def biases(self) -> dict[str, np.ndarray]:
        """The biases there are, by name (none for a preset)."""
        found = {"b_q": self.b_q, "b_k": self.b_k, "b_v": self.b_v, "b_o": self.b_o}
        return {name: b for name, b in found.items() if b is not None}

    @property
    def single_head(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """The single head's w_q, w_k, w_v and biases by name: the projections
        whole (D = C), as the golden files have it; with a variant, the first
        head's columns (of width D), as plain attention."""
        weights = {n: w for n, w in self.params.items() if n != "w_o"}
        biases = {n: b for n, b in self.biases.items() if n != "b_o"}
        if self.variant is None:
            return weights, biases
        D = self.w_o.shape[0] // self.preset.n_heads
        first = {n: w[:, :D] for n, w in weights.items()}
        return first, {n: b[:D] for n, b in biases.items()}

    def astype(self, dtype) -> Fixture:
        """The same fixture with every array cast to `dtype` (a NumPy dtype)."""
        variant = self.variant
        if variant is not None:
            cast = {n: a.astype(dtype) for n, a in variant.arrays.items()}
            variant = dataclasses.replace(variant, **cast)
        return Fixture(
            self.preset,
            self.x.astype(dtype),
            *(w.astype(dtype) for w in self.params.values()),
            **{name: b.astype(dtype) for name, b in self.biases.items()},
            variant=variant,
        )


def sinusoidal_positions(T: int, C: int) -> np.ndarray:
    """(T, C) positional encoding of "Attention Is All You Need", section 3.5.

    Each value comes from Python's `math` (the C library's scalar sin, cos and
    pow), not NumPy's vectorised ones: those take the CPU's own SIMD code, and
    an AVX-512 machine rounded 3 of the `tiny` preset's 256 values one ulp away
    from an AVX2 machine's, so the golden files held on one CPU only
    (docs/suite.md, "Portable")."""
    encoding = np.zeros((T, C))
    for i in range(0, C, 2):
        frequency = 10000.0 ** (-i / C)
        encoding[:, i] = [math.sin(t * frequency) for t in range(T)]
        if i + 1 < C:
            encoding[:, i + 1] = [math.cos(t * frequency) for t in range(T)]
    return encoding


def make_fixture(preset: Preset) -> Fixture:
    """Draw the float64 inputs and parameters of `preset`."""
    rng = np.random.default_rng(preset.seed)
    C, T = preset.d_model, preset.T
    w_q, w_k, w_v, w_o = (rng.standard_normal((C, C)) / np.sqrt(C) for _ in range(4))
    if preset.tokens is not None:
        vocabulary = sorted(set(preset.tokens))
        embedding = rng.standard_normal((len(vocabulary), C))  # (V, C)
        ids = np.array([vocabulary.index(t) for t in preset.tokens])  # (T,)
        x = embedding[ids] + sinusoidal_positions(T, C)  # (T, C)
        x = np.broadcast_to(x, (*preset.batch, T, C)).copy()
    else:
        x = rng.standard_normal((*preset.batch, T, C))
    return Fixture(preset, x, w_q, w_k, w_v, w_o)
