"""The property of how it computes at the edge of its dtype: scores near the
top of each dtype (`hostile`), and what a miss there is most likely due to.
"""

from __future__ import annotations

import math

import numpy as np

from shared.hostile import HOSTILE_SCORES, plain_attention, plain_multi_head
from shared.reordered import (
    references,
    reordered_attention,
    reordered_multi_head,
    reordered_single_head,
)
from shared.tolerances import (
    derived_tolerance,
)
from triptych.check import mistakes
from triptych.check.problems import Inputs, kv_columns, split_heads
from triptych.check.properties.overflow import one_key_wrong, overflow_probe
from triptych.check.properties.search import (
    Finding,
    Result,
    Search,
    Settings,
    agree,
    cases,
    compare,
    failed,
    passed,
    problems,
    refuses,
    search,
)

LEVELS = {
    "default": {"float32": 1e5, "float16": 1e3, "bfloat16": 1e5},
    "strict": {"float32": 1e5, "float16": 6e4, "bfloat16": 1e37},
}
"""The largest |score| of hostile magnitudes per profile and dtype. Every
profile's exp overflows where the row max is not subtracted, and reaches
past a mask filled with -1e4 in float32 and bfloat16; the default keeps q @
k^T below float16's top even taken before the scale (transformers' GPT-2
does that) and bfloat16 far from its own; strict asks this project's policy:
float16's and bfloat16's levels of its tests, near each dtype's top
(shared.hostile.HOSTILE_SCORES), and float32's 1e5."""
SIGNS = ("random", "k = -q")
"""How the scores are drawn: as x and the weights give them, or with w_k =
-w_q, so every query's score with itself is negative: a row that attends only
itself sits at -score, where a finite mask fill no longer hides the future."""


def levels(settings: Settings) -> dict[str, float]:
    return LEVELS["strict" if settings.strict else "default"]


def magnitude(score: float) -> str:
    """1e5, 6e4, 1e37: a level as the docs write it."""
    return f"{score:.0e}".replace("e+0", "e").replace("e+", "e")


def hostile(adapter, settings: Settings) -> Result:
    """Scores near the top of each dtype (`levels`): finite output, within
    the tolerance derived from a plain computation in the dtype and the
    same-dtype references."""
    id, title = (
        "hostile magnitudes",
        "large scores: no overflow, within the derived tolerance",
    )
    dtypes = [
        d for d in HOSTILE_SCORES if d in settings.dtypes and not refuses(adapter, d)
    ]
    beyond = adapter.variant and adapter.variant._replace(n_kv_heads=None).text()
    if beyond:
        return Result(
            id,
            title,
            "SKIP",
            f"the derived tolerance's references (shared/reordered/) compute "
            f"attention without {beyond}"
            + (": soft-cap holds large scores to the oracle" if "soft-cap" in beyond
               else ""),
        )  # fmt: skip
    if not dtypes:
        return Result(
            id,
            title,
            "SKIP",
            "no dtype of --dtypes has a hostile level (float32, float16, bfloat16)",
        )
    from hypothesis import strategies as st

    top = levels(settings)

    def check(case):
        problem, (dtype, sign) = case
        inputs = hostile_inputs(problem.inputs(), dtype, top[dtype], sign)
        got, want = adapter.run(inputs, dtype), adapter.truth(inputs, dtype)
        if not np.all(np.isfinite(got.out)):
            index = tuple(int(i) for i in np.argwhere(~np.isfinite(got.out))[0])
            return Finding(
                f"out is not finite at scores of {magnitude(top[dtype])} in "
                f"{dtype}: {got.out[index]} at {index}",
                index=index,
            )
        outs, weights = tolerances(adapter, inputs, dtype, want)
        found = compare("out", got.out, want.out, outs)
        if found is None and got.weights is not None:
            found = compare("weights", got.weights, want.weights, weights)
        return found

    def where(case):
        dtype, sign = case.extra
        signs = ", k = -q" if sign != "random" else ""
        return f", in {dtype} with the largest score {magnitude(top[dtype])}{signs}"

    strategy = cases(
        problems(adapter, settings, "dtypes", min_T=2),
        st.sampled_from(dtypes),
        st.sampled_from(SIGNS),
    )
    found = search(strategy, check, settings)
    if found.case is None:
        return passed(
            id,
            title,
            found,
            "finite and within the derived tolerance at scores of "
            + ", ".join(f"{magnitude(top[d])} in {d}" for d in dtypes),
        )
    if found.finding.raised:
        return failed(id, title, found, where=where)
    diagnosis = overflow_of(adapter, found, top, settings)
    if diagnosis == LOG_SUM_EXP and not settings.strict:  # right, less precise
        reason = f"{found.finding.message}: a precision, not a mistake"
        return failed(id, title, found, diagnosis, "NOTE", reason, where=where)
    return failed(id, title, found, diagnosis, where=where)


def tolerances(adapter, inputs: Inputs, dtype: str, want):
    """The derived tolerances of out and of the weights on hostile inputs."""
    found = references_at_level(adapter, inputs, dtype)
    outs, weights = [r[0] for r in found], [r[1] for r in found]
    return (
        derived_tolerance(outs, want.out, dtype),
        derived_tolerance(weights, want.weights, dtype),
    )


def hostile_inputs(
    inputs: Inputs, dtype: str, score: float | None = None, sign: str = "random"
) -> Inputs:
    """w_q and w_k scaled so that the largest |score| is `score`
    (HOSTILE_SCORES[dtype] if None); with sign "k = -q" (or "k = q"), w_k is
    -w_q (or w_q) first."""
    score = HOSTILE_SCORES[dtype] if score is None else score
    w = dict(inputs.w)
    H, H_kv, D = inputs.H, inputs.H_kv, inputs.w["w_q"].shape[-1] // inputs.H
    first = np.arange(H_kv) * (H // H_kv)  # the first query head of each KV head
    columns = (first[:, None] * D + np.arange(D)).ravel()
    if sign == "k = -q":  # each KV head's keys its first query head's, negated
        w["w_k"] = -w["w_q"][:, columns]
    elif sign == "k = q":
        w["w_k"] = w["w_q"][:, columns]
    plain = {**w, "w_k": kv_columns(w["w_k"], H, D)}
    q, k = (split_heads(inputs.x @ plain[n], H) for n in ("w_q", "w_k"))
    top = max(float(np.abs(q @ k.swapaxes(-1, -2)).max()) / math.sqrt(D), 1e-30)
    factor = math.sqrt(score / top)
    w = {**w, "w_q": w["w_q"] * factor, "w_k": w["w_k"] * factor}
    return inputs.replace(w=w)


def references_at_level(adapter, inputs: Inputs, dtype: str) -> list:
    """What `dtype` itself gets wrong on these inputs, at the adapter's level:
    a plain computation, every operation in the dtype (the loosest sane
    implementation), and shared.reordered's references in N_ORDERS orders
    (the project's precision policy, the same on every machine): a list of
    (out, weights), float64, for `derived_tolerance` (docs/suite.md)."""
    from shared.dtypes import np_dtype

    cast = {
        n: a.astype(np_dtype(dtype))
        for n, a in plain_arrays(adapter, inputs, dtype).items()
    }
    if adapter.level == "qkv":
        q, k, v = cast["q"], cast["k"], cast["v"]
        plain = plain_attention(q, k, v)
        found = references(reordered_attention, q, k, v)
    elif adapter.one_head:
        q, k, v = (
            split_heads((cast["x"] @ cast[n]).astype(cast["x"].dtype), 1)
            for n in ("w_q", "w_k", "w_v")
        )
        out, weights = plain_attention(q, k, v)
        plain = out[..., 0, :, :], weights
        w = (cast["w_q"], cast["w_k"], cast["w_v"])
        found = [  # weights (..., T, T) with the head axis of the oracle's
            (out, weights[..., None, :, :])
            for out, weights in references(reordered_single_head, cast["x"], *w)
        ]
    else:
        w = (cast["w_q"], cast["w_k"], cast["w_v"], cast["w_o"])
        plain = plain_multi_head(cast["x"], *w, inputs.H)
        found = references(reordered_multi_head, cast["x"], *w, inputs.H)
    plain = tuple(a.astype(np.float64) for a in plain)
    return [plain, *found]


def plain_arrays(adapter, inputs: Inputs, dtype: str) -> dict:
    """`adapter.arrays`, with GQA's w_k and w_v (C, H_kv * D) as plain
    attention's (C, H * D) (`kv_columns`): the same attention."""
    arrays = adapter.arrays(inputs, dtype)
    if inputs.H_kv != inputs.H and adapter.level == "x":
        D = inputs.w["w_q"].shape[-1] // inputs.H
        for n in ("w_k", "w_v"):
            arrays[n] = kv_columns(arrays[n], inputs.H, D)
    return arrays


RENORMALISED = (
    "softmax over every key, then masked and renormalised: the row max includes "
    "the masked keys, so where one of them scores far above the allowed ones every "
    "allowed exp underflows to 0 and the renormalising sum is 0 / 0 (mask the "
    "scores before the softmax)"
)
UNSCALED = (
    "q @ k^T overflows float16 before the 1/sqrt(D) scale: scale q first, or take "
    "the scores in float32"
)
MASK_FILL = (
    "masked scores filled with -1e4 instead of -inf (minGPT's masked_bias): where "
    "every allowed score of a row is below -1e4, the masked keys outweigh them and "
    "the future leaks in"
)
FINITE_FILL = (
    "the future leaks in at large scores only: masked scores filled with a finite "
    "number that large scores pass"
)


def overflow_of(adapter, found: Search, top: dict, settings: Settings) -> str | None:
    """Why hostile magnitudes failed, tried in turn: the forward already
    wrong at ordinary scores (then nothing is guessed); rows of one key wrong
    at a score past exp's range (the max not subtracted, or one max for the
    whole array: `overflow.overflow_probe`) or, in float16, at 3/4 of its
    largest (q @ k^T before the scale: `one_key_wrong`); a change
    at the last position that reaches the earlier rows at these scores (the
    masked keys count: renormalised after masking where the result is not
    finite, a -1e4 fill where that computation matches, else a finite fill);
    log-sum-exp's precision; else what is left."""
    problem, (dtype, sign) = found.case
    ordinary = problem.inputs()
    inputs = hostile_inputs(ordinary, dtype, top[dtype], sign)
    try:
        plain, want = adapter.run(ordinary, dtype), adapter.truth(ordinary, dtype)
        got = adapter.run(inputs, dtype)
    except Exception:
        return None
    if agree(plain, want, dtype) is not None:
        return (
            f"the forward is already wrong at ordinary scores (see oracle:{dtype}): "
            f"nothing to say of large ones"
        )
    finite = bool(np.all(np.isfinite(got.out)))
    overflow = overflow_probe(adapter, dtype, top[dtype], hostile_inputs)
    if overflow is not None:
        return overflow
    if dtype == "float16" and one_key_wrong(
        adapter, dtype, 0.75 * 65504, hostile_inputs
    ):
        return UNSCALED
    if future_reaches(adapter, inputs, dtype, got):
        if not finite:
            return RENORMALISED
        fill = mistakes.mistaken(
            mistakes.FILL, inputs, dtype, adapter.level, adapter.one_head
        ).out
        outs, _ = tolerances(adapter, inputs, dtype, adapter.truth(inputs, dtype))
        return MASK_FILL if compare("", got.out, fill, outs) is None else FINITE_FILL
    if finite:
        try:
            lse = log_sum_exp_form(adapter, inputs, dtype)
        except Exception:
            lse = None
        outs, _ = tolerances(adapter, inputs, dtype, adapter.truth(inputs, dtype))
        if lse is not None and compare("", got.out, lse, outs) is None:
            return LOG_SUM_EXP
        return (
            "loses precision at large scores beyond what a plain computation in "
            "the dtype loses"
        )
    return (
        f"not finite at scores of {magnitude(top[dtype])} though a row max is "
        f"subtracted and the future stays out: a step leaves the range of {dtype} "
        f"(or of the dtype it computes in)"
    )


LOG_SUM_EXP = (
    "the softmax as exp(score - logsumexp(scores)): the log-sum-exp is rounded "
    "at the scores' magnitude, so each weight is off by about score x the dtype's "
    "epsilon, where exp(score - max) / sum is exact in the max; right, and less "
    "precise at large scores"
)


def log_sum_exp_form(adapter, inputs: Inputs, dtype: str) -> np.ndarray:
    """out of attention whose softmax is exp(s - (max + log(sum(exp(s -
    max))))), every operation in `dtype` as shared.hostile's plain
    computation does, at the adapter's level."""
    from shared.dtypes import np_dtype

    kind = np_dtype(dtype)

    def rounded(a):
        return np.asarray(a).astype(kind)

    cast = {n: rounded(a) for n, a in plain_arrays(adapter, inputs, dtype).items()}
    if adapter.level == "qkv":
        q, k, v = cast["q"], cast["k"], cast["v"]
    else:
        H = 1 if adapter.one_head else inputs.H
        q, k, v = (split_heads(rounded(cast["x"] @ cast[f"w_{n}"]), H) for n in "qkv")
    D = q.shape[-1]
    with np.errstate(all="ignore"):
        scores = rounded(rounded(q / kind.type(math.sqrt(D))) @ k.swapaxes(-1, -2))
        scores = np.where(inputs.allowed(), scores, -np.inf).astype(kind)
        top = scores.max(axis=-1, keepdims=True)
        total = rounded(np.exp(scores - top)).sum(axis=-1, keepdims=True)
        lse = rounded(top + rounded(np.log(rounded(total))))
        out = rounded(rounded(np.exp(rounded(scores - lse))) @ v)
    if adapter.level == "qkv":
        return out.astype(np.float64)
    *batch, H, T, D = out.shape
    merged = out.swapaxes(-3, -2).reshape(*batch, T, H * D)
    if not adapter.one_head:
        merged = rounded(merged @ cast["w_o"])
    return merged.astype(np.float64)


def future_reaches(adapter, inputs: Inputs, dtype: str, got) -> bool:
    """Whether fresh x at the last position changes an earlier row at these
    scores (its values beyond the derived tolerance, or whether it is
    finite)."""
    T = inputs.x.shape[-2]
    if T < 2:
        return False
    x = inputs.x.copy()
    x[..., -1, :] = np.random.default_rng(5).standard_normal(x[..., -1, :].shape)
    changed = inputs.replace(x=x)
    try:
        after = adapter.run(changed, dtype).out[..., : T - 1, :]
    except Exception:
        return False
    before = got.out[..., : T - 1, :]
    if not np.array_equal(np.isfinite(before), np.isfinite(after)):
        return True
    both = np.isfinite(before) & np.isfinite(after)
    outs, _ = tolerances(adapter, inputs, dtype, adapter.truth(inputs, dtype))
    return (
        compare("", np.where(both, after, 0), np.where(both, before, 0), outs)
        is not None
    )
