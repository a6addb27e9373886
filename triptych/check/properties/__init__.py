"""The properties `triptych check` proves or refutes, one function each, over
inputs that hypothesis draws; for a failure, the smallest failing input
hypothesis finds and a one-line diagnosis.

Each property runs the implementation (through its adapter) on drawn
problems and holds it to the float64 oracle within the tolerance of the
dtype (`shared.tolerances`), or to a relation with itself (causality,
independence, determinism). A property ends in one of

    PASS   held on every input tried
    FAIL   an input breaks it: the smallest one found, the largest difference,
           and what it looks like
    NOTE   it deviates from the contract in a known, deliberate way that is
           not a failure (float64 computed in float32; under the default
           profile, fully masked rows as NaN or the uniform mean, and a NaN
           behind the mask that reaches earlier rows where nothing finite
           does)
    SKIP   the signature cannot show it (no mask, no weights, no autodiff)

`triptych check` runs them all in a process of its own per target; the pytest
plugin (`triptych.check.plugin`) runs each as a test.

    search.py        what every property is made of: Settings, Finding,
                     Result, hypothesis's search for the smallest failing
                     case, the problems it draws, the comparison within a
                     tolerance
    oracle.py        oracle:<dtype>
    causality.py     causality
    weights.py       rows sum to 1, scale, mask
    independence.py  independence (of batch items and of heads)
    masked.py        fully masked rows, NaN behind the mask
    numerics.py      hostile magnitudes
    determinism.py   the same bits from two calls
    gradients.py     gradients
    variants.py      window, soft-cap: run where the check is told the variant

The registry is below: PROPERTIES (in the order they are reported),
property_ids (those of a profile, PROFILES, less --skip), and run_property,
which runs one by id, judged at the tolerance `judged.judge` finds
for each problem. The property
modules import search.py, this one imports them all, never the other way.
Adding a property: a function (adapter, Settings) -> Result in one of those
modules, and its id in PROPERTIES (and in JUDGED, if it is held to the
working dtype's tolerance).
"""

from __future__ import annotations

from triptych.check.causes import raised, raised_hint
from triptych.check.properties.causality import causality
from triptych.check.properties.determinism import determinism
from triptych.check.properties.gradients import gradients
from triptych.check.properties.independence import independence
from triptych.check.properties.judged import judge
from triptych.check.properties.masked import fully_masked_rows, nan_behind_mask
from triptych.check.properties.numerics import hostile
from triptych.check.properties.oracle import oracle
from triptych.check.properties.search import (
    DTYPES,
    SHRINK_CALLS,
    STATUSES,
    Case,
    Finding,
    Result,
    Search,
    Settings,
    json_safe,
    rich_problem,
    search,
)
from triptych.check.properties.variants import softcap, window
from triptych.check.properties.weights import mask, rows_sum_to_one, scale

__all__ = [
    "DTYPES",
    "JUDGED",
    "LEFT_OUT",
    "PROFILES",
    "PROPERTIES",
    "SHRINK_CALLS",
    "STATUSES",
    "VARIANT_PROPERTIES",
    "Case",
    "Finding",
    "Result",
    "Search",
    "Settings",
    "causality",
    "determinism",
    "fully_masked_rows",
    "gradients",
    "hostile",
    "independence",
    "json_safe",
    "judge",
    "mask",
    "nan_behind_mask",
    "oracle",
    "property_ids",
    "rich_problem",
    "rows_sum_to_one",
    "run_property",
    "scale",
    "search",
    "softcap",
    "window",
]

PROPERTIES = {
    "causality": causality,
    "rows sum to 1": rows_sum_to_one,
    "scale": scale,
    "mask": mask,
    "independence": independence,
    "fully masked rows": fully_masked_rows,
    "NaN behind the mask": nan_behind_mask,
    "hostile magnitudes": hostile,
    "determinism": determinism,
    "gradients": gradients,
}
"""The properties beside oracle:<dtype>, in the order they are reported."""
VARIANT_PROPERTIES = {"window": window, "soft-cap": softcap}
"""The properties of a variant's options, run (after causality) where the
check is told the option of the same name (Variant.window, .softcap)."""


PROFILES = {
    "default": "what every correct causal attention must do; a documented "
    "policy difference (NaN behind the mask that only NaN and Inf cross, a "
    "fully masked row of NaN or the uniform mean) is a NOTE",
    "strict": "the default and this project's own policies: a fully masked row "
    "gives zeros (NaN FAILs), nothing behind the mask reaches earlier rows, "
    "hostile magnitudes near the top of each dtype",
    "course": "what a student must get right: the default without the policies "
    "(fully masked rows, NaN behind the mask)",
}
"""--profile: what each asks (docs/check.md#profiles)."""
LEFT_OUT = {"course": ("fully masked rows", "NaN behind the mask")}
"""The properties a profile does not run."""


def property_ids(settings: Settings, skip=()) -> list[str]:
    """Every property id of the settings' profile: oracle:<dtype> for each
    dtype, then PROPERTIES; those in `skip` left out."""
    ids = [f"oracle:{d}" for d in settings.dtypes] + list(PROPERTIES)
    variant = settings.variant
    told = [
        id
        for id, option in (("window", "window"), ("soft-cap", "softcap"))
        if variant is not None and getattr(variant, option) is not None
    ]
    at = ids.index("causality") + 1
    ids[at:at] = told
    left_out = set(LEFT_OUT.get(settings.profile, ())) | set(skip)
    return [id for id in ids if id not in left_out]


JUDGED = (
    "causality",
    "window",
    "soft-cap",
    "rows sum to 1",
    "scale",
    "mask",
    "independence",
    "fully masked rows",
    "NaN behind the mask",
)
"""The properties held to the tolerance of the working dtype, or of float32
on the problems where the target computes in float32 inside (`judge`)."""


def run_property(adapter, settings: Settings, id: str) -> Result:
    """One property by id; the comparisons of those in JUDGED held to the
    tolerance `judge` finds for each problem (its reason says where that is
    float32's)."""
    if id.startswith("oracle:"):
        return oracle(adapter, settings, id.removeprefix("oracle:"))
    check = PROPERTIES.get(id) or VARIANT_PROPERTIES[id]
    adapter.judged_now = set()
    try:
        result = check(adapter, settings)
    except Exception as error:  # raised outside a drawn input: the target's own
        reason = raised(error)
        return Result(id, id, "FAIL", reason, raised_hint(error))
    lenient = "float32" in adapter.judged_now and settings.working == "float64"
    if lenient and id in JUDGED and result.status != "SKIP":
        result.reason += (
            " (judged at the float32 tolerance where it computes in float32 "
            "inside, see oracle:float64)"
        )
    return result
