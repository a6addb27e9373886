"""Backend-neutral parts of Attention Triptych: presets, seeded fixtures, the
float64 oracle, golden files, the tolerance table, input validation and layout
converters, the variants (Variant, Rotary). Imports NumPy only."""

from shared.config import PRESETS, TOY_SENTENCE, Preset
from shared.fixture import Fixture, make_fixture
from shared.tolerances import (
    TOLERANCES,
    assert_close,
    is_close,
    max_abs_diff,
    tolerance,
)
from shared.variants import Rotary, Variant

__all__ = [
    "PRESETS",
    "TOLERANCES",
    "TOY_SENTENCE",
    "Fixture",
    "Preset",
    "Rotary",
    "Variant",
    "assert_close",
    "is_close",
    "make_fixture",
    "max_abs_diff",
    "tolerance",
]
