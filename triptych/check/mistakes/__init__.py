"""The classic mistakes of attention, each computed on purpose, to name the one
an implementation made.

When a property fails, `diagnose` computes each mistake that could explain it
(in float64 NumPy, on the inputs the implementation was given) and names the
first whose results the implementation matches, within the tolerance of its
dtype, on the smallest failing input and on a richer one
(`triptych check`'s diagnosis). `mistaken(None, ...)` is attention with no
mistake: a vectorized twin of the loop oracle, which the tests hold to it.

Mistakes that show only as a pattern (a future that leaks at some offset, a
max not subtracted that overflows, a NaN from a fully masked row, a NaN behind
the mask) are named by the property that finds them
(`triptych.check.properties`), not here.

    known.py      the mistakes: MISTAKES, BY_NAME, FILL
    computed.py   attention with a mistake (`mistaken`, `core`), float64
    diagnosis.py  which mistakes a signature can show, `diagnose`, `named`

Every name is imported from here (`mistakes.diagnose`, `mistakes.MISTAKES`).
"""

from __future__ import annotations

from triptych.check.mistakes.computed import (
    Mistaken,
    alibi_bias,
    core,
    flattened,
    mistaken,
    rms_norm,
    rotated,
    straight_merge,
    straight_split,
    variant_mistaken,
)
from triptych.check.mistakes.diagnosis import (
    VARIANT_NEEDS,
    applicable,
    diagnose,
    matches,
    named,
)
from triptych.check.mistakes.known import BY_NAME, FILL, MISTAKES, Mistake

__all__ = [
    "BY_NAME",
    "FILL",
    "MISTAKES",
    "VARIANT_NEEDS",
    "Mistake",
    "Mistaken",
    "alibi_bias",
    "applicable",
    "core",
    "diagnose",
    "flattened",
    "matches",
    "mistaken",
    "named",
    "rms_norm",
    "rotated",
    "straight_merge",
    "straight_split",
    "variant_mistaken",
]
