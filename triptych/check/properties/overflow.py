"""Why large scores break a softmax, read from rows of one key, whose
weight is 1 whatever their score (`overflow_probe`): exp overflowing
without the row max subtracted, in the dtype under test or in the wider one
a target may compute in (a float64 mask promotes exp to float64), and one
max subtracted for the whole array (`z - z.max()`), under which a row far
below the largest score underflows to 0 / 0.
"""

from __future__ import annotations

from triptych.check.properties.search import agree

OVERFLOW_PROBES = {"float32": 200.0, "float16": 20.0, "bfloat16": 200.0}
WIDE_PROBE = 1000.0
"""Past float64's exp too (exp(710) is inf): tried where the level reached it,
for a target that computes its softmax in float64 (a float64 mask added)."""
"""Scores past what exp takes without the row max subtracted (exp(89) is
inf in float32 and bfloat16, exp(11.1) in float16), far below what q @ k^T
needs to overflow."""

MAX_NOT_SUBTRACTED = (
    "max not subtracted before exp: exp(score) overflows to inf, and inf / inf = NaN"
)
GLOBAL_MAX = (
    "one max subtracted for the whole array (z - z.max()), not each row's: a row "
    "whose scores sit far below the largest score anywhere underflows to 0 / 0 = "
    "NaN (subtract z.max(axis=-1, keepdims=True))"
)


def overflow_probe(adapter, dtype: str, level: float, hostile) -> str | None:
    """MAX_NOT_SUBTRACTED where rows of one key at +score are wrong, GLOBAL_MAX
    where they are right and rows of one key at -score beside them (another
    head) are not; at OVERFLOW_PROBES[dtype], then WIDE_PROBE where `level`
    (the failing score) reached past it. None where neither is wrong.
    `hostile` is numerics.hostile_inputs (which imports this module)."""
    probes = [OVERFLOW_PROBES[dtype]] + [WIDE_PROBE] * (level > WIDE_PROBE)
    if any(one_key_wrong(adapter, dtype, score, hostile) for score in probes):
        return MAX_NOT_SUBTRACTED
    if any(one_key_wrong(adapter, dtype, s, hostile, mixed=True) for s in probes):
        return GLOBAL_MAX
    return None


def one_key_wrong(adapter, dtype: str, score: float, hostile, mixed=False) -> bool:
    """Whether rows of one key (T = 1, k = q, so every score is +`score`)
    come out wrong: a row of one key has the weight 1 whatever its score, so
    out is v's at the dtype's tolerance. Wrong at OVERFLOW_PROBES: exp(score)
    overflowed, the max not subtracted; at 3/4 of float16's largest: q @ k^T
    overflowed before the 1/sqrt(D) scale. With `mixed`, two heads, the
    second's keys negated (its score -score): wrong where one max serves
    every row. False where the signature has one head (or one KV head)."""
    from triptych.check.problems import SMALL_SHAPES, Problem, Shape, fit

    catalogue_shape = Shape(1, 2, 2, 1) if mixed else SMALL_SHAPES[0]
    shape = fit(
        catalogue_shape,
        adapter.batch_ranks,
        adapter.one_head,
        adapter.fixed,
        adapter.variant,
    )
    problem = Problem(*shape[:4], 0, variant=adapter.variant, width=shape[4])
    inputs = hostile(problem.inputs(), dtype, score, "k = q")
    if mixed:
        if problem.H < 2 or inputs.H_kv < 2:
            return False
        w_k = inputs.w["w_k"].copy()
        D = w_k.shape[-1] // inputs.H_kv
        w_k[:, D:] *= -1  # every KV head after the first: scores of -score
        inputs = inputs.replace(w={**inputs.w, "w_k": w_k})
    try:
        got, want = adapter.run(inputs, dtype), adapter.truth(inputs, dtype)
    except Exception:
        return False
    return agree(got, want, dtype) is not None
