"""The properties of what the mask hides: a query row that may attend no key
(`fully_masked_rows`: zeros, NaN or the uniform mean), and a NaN or Inf behind
the mask, which must change no earlier row (`nan_behind_mask`).
"""

from __future__ import annotations

import math

import numpy as np

from triptych.check import mistakes
from triptych.check.adapters import quiet
from triptych.check.properties.empty import UNIFORM, empty_rows, policy_of
from triptych.check.properties.judged import judge
from triptych.check.properties.search import (
    Case,
    Finding,
    Result,
    Settings,
    agree,
    agree_up_to,
    cases,
    changed_after,
    diagnosis_of,
    failed,
    passed,
    problems,
    search,
)

POISONS = (math.nan, math.inf, -math.inf)


def fully_masked_rows(adapter, settings: Settings) -> Result:
    """A query row that may attend no key: zeros (the contract), or which
    other policy (NaN, the uniform mean), in the output and the weights, on
    T > 1, once the rows that attend agree with the oracle. The default
    profile notes NaN and the uniform mean (the policies of
    nn.MultiheadAttention, JAX and flax); strict fails NaN."""
    id, title = "fully masked rows", "fully masked rows: zeros, NaN or the uniform mean"
    if not adapter.takes_mask:
        return Result(id, title, "SKIP", "takes no mask: no row can be fully masked")
    dtype, tol = settings.working, settings.tol

    def check(case):
        tol = judge(adapter, settings, case.problem)
        inputs = case.problem.inputs()
        got, want = adapter.run(inputs, dtype), adapter.truth(inputs, dtype)
        attends = inputs.allowed().any(axis=-1)
        found = agree(got, want, tol, ~empty_rows(adapter, inputs), attends)
        if found is not None:
            found.message = f"rows that may attend: {found.message}"
            return found
        policy = policy_of(adapter, inputs, got, dtype, tol)
        return (
            None if policy == "zeros" else Finding(f"fully masked rows give {policy}")
        )

    strategy = problems(adapter, settings, "masks", masks=("empty rows",), min_T=2)
    found = search(cases(strategy), check, settings)
    if found.case is None:
        return passed(id, title, found, "zeros, as the contract says,")
    message = found.finding.message
    if found.finding.raised:
        return failed(id, title, found)
    tol = judge(adapter, settings, found.case.problem)
    if not message.startswith("fully masked"):  # the mask itself is wrong
        names = [m.name for m in mistakes.MISTAKES if m.property == "mask"]
        diagnosis = diagnosis_of(adapter, found.case, dtype, tol, names)
        return failed(
            id, title, found, diagnosis or diagnosis_of(adapter, found.case, dtype, tol)
        )
    kinds = {part.split(" (")[0] for part in policy_parts(message)} - {"zeros"}
    if kinds <= {"NaN", *UNIFORM}:
        diagnosis = " and ".join(POLICIES[k] for k in POLICIES if k in kinds)
        strict_fail = settings.strict and "NaN" in kinds
        status = "FAIL" if strict_fail else "NOTE"
        reason = message if strict_fail else f"{message}: a policy, not a mistake"
        return failed(id, title, found, diagnosis, status, reason)
    diagnosis = "none of the known policies (zeros, NaN, a uniform mean)"
    return failed(id, title, found, diagnosis, reason=message)


POLICIES = {
    "NaN": "NaN from a fully masked row: softmax of a row of -inf is 0 / 0 (the "
    "policy of nn.MultiheadAttention's path that returns weights)",
    UNIFORM[0]: "the policy of jax.nn.dot_product_attention, flax and transformers: "
    "masked scores are a large negative number, not -inf",
    UNIFORM[1]: "masked scores a large negative number, the causal mask kept apart",
}


def policy_parts(message: str) -> list[str]:
    """'fully masked rows give A (out), B (weights)' -> ['A (out)', 'B (weights)']."""
    return message.removeprefix("fully masked rows give ").split(", ")


def nan_behind_mask(adapter, settings: Settings) -> Result:
    """NaN or Inf in x after position i (behind the causal mask), or in the
    padding (behind a key-padding mask), leaves the earlier rows as they were.
    Where a finite change there reaches them too, the mask leaks: FAIL. Where
    only NaN and Inf do (0 * NaN = NaN in weights @ v: SDPA, nanoGPT, the
    lessons), the default profile notes it and strict fails it."""
    id, title = "NaN behind the mask", "a NaN or Inf behind the mask changes nothing"
    dtype, tol = settings.working, settings.tol
    from hypothesis import strategies as st

    kinds = ("causal", "padding") if adapter.takes_mask else ("causal",)

    def check(case):
        tol = judge(adapter, settings, case.problem)
        inputs, i, poison = poisoned(case)
        x = inputs.x.copy()
        x[..., i + 1 :, :] = poison
        clean, poisoned_run = (
            adapter.run(inputs, dtype),
            adapter.run(inputs.replace(x=x), dtype),
        )
        return agree_up_to(
            clean, poisoned_run, i, tol, f"x set to {poison} from position {i + 1} on"
        )

    def where(case):
        position, poison, kind = case.extra
        i = position % (case.problem.T - 1)
        return f", {poison} in x after position {i} (behind the {kind} mask)"

    for kind in kinds:  # the padding on the shapes of the masks
        strategy = cases(
            problems(
                adapter, settings, "masks" if kind == "padding" else None, min_T=2
            ),
            st.integers(0, 127),
            st.sampled_from(POISONS),
            st.just(kind),
        )
        found = search(strategy, check, settings)
        if found.case is not None:
            break
    if found.case is None:
        return passed(id, title, found, "earlier rows unchanged")
    if found.finding.raised:
        return failed(id, title, found, where=where)
    tol = judge(adapter, settings, found.case.problem)
    finite, diagnosis = leak_of(adapter, found.case, dtype, tol)
    if finite or settings.strict:
        return failed(id, title, found, diagnosis, where=where)
    reason = (
        f"{found.finding.message}; nothing finite behind the mask reaches earlier "
        f"rows: a policy, not a leak (--profile strict fails it)"
    )
    return failed(id, title, found, diagnosis, "NOTE", reason, where=where)


def poisoned(case: Case):
    """The case's inputs (with the padding mask, for that kind), the last
    clean position i and the poison."""
    problem, (position, poison, kind) = case
    i = position % (problem.T - 1)
    inputs = problem.inputs()
    if kind == "padding":
        *batch, T, _ = inputs.x.shape
        keep = np.arange(T) < i + 1
        inputs = inputs.replace(mask=np.broadcast_to(keep, (*batch, 1, 1, T)).copy())
    return inputs, i, poison


def leak_of(adapter, case: Case, dtype: str, tol: str) -> tuple[bool, str]:
    """Whether a finite change behind the mask reaches the earlier rows too
    (the mask itself leaks), and where the poison got in: for q, k, v apart,
    the value or the key; else what a plain weighted sum does."""
    problem, (_, poison, kind) = case
    inputs, i, _ = poisoned(case)
    behind = f"the {kind} mask"
    before = adapter.run(inputs, dtype)
    after = adapter.run(changed_after(inputs, i, problem.seed), dtype)
    if agree_up_to(before, after, i, tol, "") is not None:
        return True, (
            f"{behind.removeprefix('the ')} leaks: a finite change behind it reaches "
            f"earlier rows too (see causality and mask)"
        )
    if adapter.level == "qkv" and kind == "causal":
        arrays = adapter.arrays(inputs, dtype)
        for name, word, why in (
            ("v", "value", "0 * NaN = NaN in weights @ v"),
            ("k", "key", "the mask is added to the scores: NaN + -inf = NaN"),
        ):
            changed = {**arrays, name: arrays[name].copy()}
            changed[name][..., i + 1 :, :] = poison
            args = {n: adapter.framework_array(a, dtype) for n, a in changed.items()}
            try:
                with quiet():
                    out = adapter.outcome(
                        adapter.call(args, None, problem.H, dtype), inputs
                    )
            except Exception:
                continue
            if not np.all(np.isfinite(out.out[..., : i + 1, :])):
                return False, (
                    f"a {poison} {word} behind {behind} reaches earlier rows: {why}"
                )
    return False, (
        f"a NaN or Inf behind {behind} reaches earlier rows: a plain weights @ v "
        f"computes 0 * NaN = NaN (and a mask added to the scores NaN + -inf = NaN)"
    )
