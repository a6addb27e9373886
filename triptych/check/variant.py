"""The variant a target implements, as `triptych check` is told it:
--n-kv-heads, --window, --rotary, --softcap, --alibi, --sinks, --qk-norm
(docs/check.md#variants).

A `Variant` is what the options say, once for the run. The problems draw
their shapes and arrays for it (`problems.fit`, `Problem.inputs`: w_k and
w_v (C, H_kv * D), the sinks, the norms' weights); the target is called with
one shared.Variant (`variant=`, as our `multi_head_attention` takes it) or
with its options by keyword (`keywords`, as most libraries take them), and
the oracle (`shared.reference.reference_multi_head`) computes with the same.
"""

from __future__ import annotations

import argparse
from typing import NamedTuple

from shared.variants import ROTARY_STYLES, Rotary, rotary_width

EXTRA_NAMES = ("sinks", "q_norm", "k_norm")
"""The arrays a variant adds to x and the weights, drawn with each problem."""


class Variant(NamedTuple):
    """What the options say; None (or False) where an option is not given.

    Attributes:
        n_kv_heads: H_kv; each problem draws H = H_kv x 1, 2 or 4 query heads.
        rotary: a shared.variants.Rotary. window: W. softcap: c.
        alibi, sinks, qk_norm: the options given.
    """

    n_kv_heads: int | None = None
    rotary: Rotary | None = None
    window: int | None = None
    softcap: float | None = None
    alibi: bool = False
    sinks: bool = False
    qk_norm: bool = False

    def to_json(self) -> dict:
        found = self._asdict()
        if self.rotary is not None:
            found["rotary"] = self.rotary._asdict()
        return found

    @classmethod
    def from_json(cls, found: dict | None) -> Variant | None:
        if not found:
            return None
        rotary = found.get("rotary")
        return cls(**{**found, "rotary": None if rotary is None else Rotary(**rotary)})

    def extra_names(self) -> tuple[str, ...]:
        """The arrays drawn beside x and the weights: sinks, q_norm, k_norm."""
        return ("sinks",) * self.sinks + ("q_norm", "k_norm") * self.qk_norm

    def keywords(self, arrays: dict) -> dict:
        """The keywords of our multi_head_attention for this variant, the
        drawn arrays (`extra_names`) taken from `arrays`."""
        found = {
            "n_kv_heads": self.n_kv_heads,
            "rotary": self.rotary,
            "window": self.window,
            "softcap": self.softcap,
        }
        found = {n: v for n, v in found.items() if v is not None}
        if self.alibi:
            found["alibi"] = True
        return found | {n: arrays[n] for n in self.extra_names()}

    def shared(self, arrays: dict):
        """The one shared.Variant of this variant, with the drawn arrays
        (`extra_names`) from `arrays`: what our functions and the oracle take."""
        from shared.variants import Variant as SharedVariant

        return SharedVariant(**self.keywords(arrays))

    def heads(self, H: int) -> tuple[int, int]:
        """(H, H_kv) of a catalogue shape of H heads: H_kv x H query heads;
        with ALiBi, 3 or 6 where the catalogue has 2 or 4 (`ALIBI_HEADS`)."""
        if self.alibi:
            H = ALIBI_HEADS.get(H, H)
        if self.n_kv_heads is None:
            return H, H
        return self.n_kv_heads * H, self.n_kv_heads

    def width(self, D: int) -> int:
        """The head width drawn for a catalogue width D: the smallest from D up
        whose rotary width R = int(fraction * D) is even and turns at least
        ROTARY_PAIRS pairs."""
        if self.rotary is None:
            return D
        while not fits_rotary(D, self.rotary):
            D += 1
        return D

    def sizes(self) -> str:
        """Which sizes the problems are drawn at for this variant, and why
        (the report says it beside how the target was called); "" where the
        catalogue's own sizes show every mistake."""
        found = []
        if self.rotary is not None:
            width = self.width(1)
            R = rotary_width(width, self.rotary.fraction)
            found.append(f"head widths from {width} ({R // 2} pairs rotated)")
        if self.alibi:
            counts = sorted({self.heads(H)[0] for H in (1, 2, 4)})
            found.append(
                f"{', '.join(map(str, counts))} heads (not only powers of two)"
            )
        if self.window is not None:
            found.append(f"T both sides of the window of {self.window}")
        return "; ".join(found)

    def text(self) -> str:
        """'2 KV heads, rotary neox (base 10000, fraction 1), window 3'."""
        parts = []
        if self.n_kv_heads is not None:
            parts.append(f"{self.n_kv_heads} KV head{'s' * (self.n_kv_heads > 1)}")
        if self.rotary is not None:
            r = self.rotary
            parts.append(f"rotary {r.style} (base {r.base:g}, fraction {r.fraction:g})")
        if self.window is not None:
            parts.append(f"window {self.window}")
        if self.softcap is not None:
            parts.append(f"soft-cap {self.softcap:g}")
        parts += [name for name in ("alibi", "sinks", "qk_norm") if getattr(self, name)]
        return ", ".join(parts).replace("qk_norm", "QK-norm").replace("alibi", "ALiBi")


ROTARY_PAIRS = 4
"""The fewest pairs a drawn head turns with rotary positions: at one pair
NeoX's halves (m, m + R/2) and GPT-J's adjacent pairs (2m, 2m + 1) are the
same pair, so a model rotating the wrong ones passes; at 4 every style and
base mistake shows, and the widths stay small (8 at fraction 1)."""
ALIBI_HEADS = {2: 3, 4: 6}
"""The head counts drawn with ALiBi for the catalogue's 2 and 4: not powers
of two, so the slopes of the interleaved half (every other slope of the
next power of two, Press et al.) are computed and compared too."""


def fits_rotary(D: int, rotary: Rotary) -> bool:
    R = rotary_width(D, rotary.fraction)
    return R >= 2 * ROTARY_PAIRS and R % 2 == 0


def variant_of(args) -> Variant | None:
    """The Variant of the parsed options (None: plain attention)."""
    variant = Variant(
        args.n_kv_heads,
        args.rotary,
        args.window,
        args.softcap,
        args.alibi,
        args.sinks,
        args.qk_norm,
    )
    return None if variant == Variant() else variant


def parse_rotary(text: str) -> Rotary:
    """--rotary neox|gptj[,base=B][,fraction=F] as a Rotary."""
    style, *rest = [part.strip() for part in text.split(",")]
    if style not in ROTARY_STYLES:
        raise argparse.ArgumentTypeError(
            f"the style comes first, neox (rotate halves) or gptj (interleaved "
            f"pairs), then base=B, fraction=F if not 10000 and 1; got {text!r}"
        )
    settings = {}
    for part in rest:
        name, _, value = part.partition("=")
        if name not in ("base", "fraction") or name in settings:
            raise argparse.ArgumentTypeError(
                f"after the style, base=B and fraction=F; got {part!r}"
            )
        try:
            settings[name] = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{name} must be a number, got {value!r}"
            ) from None
    if settings.get("base", 10000.0) <= 1:
        raise argparse.ArgumentTypeError(f"base must be > 1, got {settings['base']:g}")
    if not 0 < settings.get("fraction", 1.0) <= 1:
        raise argparse.ArgumentTypeError(
            f"fraction must be in (0, 1], got {settings['fraction']:g}"
        )
    return Rotary(style=style, **settings)


def add_options(add, prefix: str = "--") -> None:
    """The variant's options, `add` being a parser's add_argument (or a
    pytest group's addoption, with prefix "--attention-")."""
    from triptych.common.parser import integer_at_least, positive_float

    add(
        prefix + "n-kv-heads",
        type=integer_at_least(1),
        metavar="N",
        help="GQA (MQA at 1): the target takes w_k, w_v (C, N * D), query head h "
        "reading KV head h // (H / N); each problem has H = N x 1, 2 or 4 heads",
    )
    add(
        prefix + "window",
        type=integer_at_least(1),
        metavar="W",
        help="a sliding window: key j reaches query i iff i - W < j <= i "
        "(transformers' convention: W keys, the query's own included)",
    )
    add(
        prefix + "rotary",
        type=parse_rotary,
        metavar="STYLE[,base=B][,fraction=F]",
        help="rotary positions: neox (rotate halves, Llama) or gptj (interleaved "
        "pairs), theta B (10000) on the first F (1) of each head's width; passed "
        "as rotary=Rotary(B, STYLE, F)",
    )
    add(
        prefix + "softcap",
        type=positive_float,
        metavar="C",
        help="logit soft-capping: each scaled score s becomes C tanh(s / C), "
        "before the mask (Gemma 2)",
    )
    add(
        prefix + "alibi",
        action="store_true",
        help="ALiBi: slope_h (j - i) added to each score",
    )
    add(
        prefix + "sinks",
        action="store_true",
        help="a drawn logit per head in the softmax's denominator (gpt-oss), "
        "passed as sinks (H,)",
    )
    add(
        prefix + "qk-norm",
        action="store_true",
        help="RMSNorm of q and k over the head width, before rotary positions "
        "(Qwen 3): drawn weights passed as q_norm, k_norm (D,)",
    )
