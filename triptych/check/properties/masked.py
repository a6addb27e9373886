"""The properties of what the mask hides: a query row that may attend no key
(`fully_masked_rows`: zeros, NaN or the uniform mean), and a NaN or Inf behind
the mask, which must change no earlier row (`nan_behind_mask`).
"""

from __future__ import annotations

import math

import numpy as np

from triptych.check import mistakes
from triptych.check.adapters import quiet
from triptych.check.problems import Inputs
from triptych.check.properties.search import (
    Case,
    Finding,
    Result,
    Settings,
    agree,
    agree_up_to,
    cases,
    changed_after,
    compare,
    failed,
    passed,
    problems,
    search,
)

POISONS = (math.nan, math.inf, -math.inf)


UNIFORM = ("uniform over all T keys", "uniform over the keys up to i")
"""The policies beside zeros and NaN: JAX's and flax's (masked scores a large
negative number, so a fully masked row is a row of equal scores), and the same
with the causal mask kept."""


def fully_masked_rows(adapter, settings: Settings) -> Result:
    """A query row that may attend no key: zeros (the contract), or which
    other policy (NaN, the uniform mean), in the output and the weights."""
    id, title = "fully masked rows", "fully masked rows: zeros, NaN or the uniform mean"
    if not adapter.takes_mask:
        return Result(id, title, "SKIP", "takes no mask: no row can be fully masked")
    dtype, tol = settings.working, settings.tol

    def check(case):
        inputs = case.problem.inputs()
        got, want = adapter.run(inputs, dtype), adapter.truth(inputs, dtype)
        policy = policy_of(adapter, inputs, got, dtype, tol)
        if policy != "zeros":
            return Finding(f"fully masked rows give {policy}")
        attends = inputs.allowed().any(axis=-1)
        return agree(got, want, tol, ~empty_rows(adapter, inputs), attends)

    found = search(cases(problems(adapter, masks=("empty rows",))), check, settings)
    if found.case is None:
        return passed(id, title, found, "zeros, as the contract says,")
    message = found.finding.message
    if found.finding.raised or not message.startswith("fully masked"):
        return failed(id, title, found)
    if "NaN" in message:
        diagnosis = "NaN from a fully masked row: softmax of a row of -inf is 0 / 0"
        return failed(id, title, found, diagnosis, reason=message)
    if all(part.split(" (")[0] in UNIFORM for part in policy_parts(message)):
        diagnosis = (
            "the policy of jax.nn.dot_product_attention and flax: masked scores "
            "are a large negative number, not -inf"
        )
        return failed(id, title, found, diagnosis, "NOTE", message)
    diagnosis = "none of the known policies (zeros, NaN, a uniform mean)"
    return failed(id, title, found, diagnosis, reason=message)


def policy_parts(message: str) -> list[str]:
    """'fully masked rows give A (out), B (weights)' -> ['A (out)', 'B (weights)']."""
    return message.removeprefix("fully masked rows give ").split(", ")


def empty_rows(adapter, inputs: Inputs) -> np.ndarray:
    """The rows of out (at the adapter's level) whose query may attend nothing."""
    attends = inputs.allowed().any(axis=-1)  # (..., H, T)
    return ~attends if adapter.level == "qkv" else ~attends.any(axis=-2)


def policy_of(adapter, inputs: Inputs, got, dtype: str, tol: str) -> str:
    """Which policy the empty rows of out (and of the weights) follow: 'zeros',
    'NaN', one of UNIFORM, 'something else', or 'A (out), B (weights)'."""
    w = {**inputs.w, "w_q": np.zeros_like(inputs.w["w_q"])}  # every score 0
    flat = inputs.replace(w=w, mask=None)
    level = (adapter.level, adapter.one_head)
    up_to_i = mistakes.mistaken(None, flat, dtype, *level)
    every = mistakes.mistaken(mistakes.BY_NAME["not causal"], flat, dtype, *level)
    empty = empty_rows(adapter, inputs)
    found = {"out": policy(got.out[empty], every.out[empty], up_to_i.out[empty], tol)}
    if got.weights is not None:
        empty = ~inputs.allowed().any(axis=-1)  # (..., H, T)
        found["weights"] = policy(
            got.weights[empty], every.weights[empty], up_to_i.weights[empty], tol
        )
    if len(set(found.values())) == 1:
        return found["out"]
    return ", ".join(f"{name} ({what})" for what, name in found.items())


def policy(rows, uniform_all, uniform_up_to_i, tol) -> str:
    """The policy of some fully masked rows, given what each uniform one gives."""
    if rows.size == 0 or np.all(rows == 0.0):
        return "zeros"
    if np.all(np.isnan(rows)):
        return "NaN"
    if compare("", rows, uniform_all, tol) is None:
        return UNIFORM[0]
    if compare("", rows, uniform_up_to_i, tol) is None:
        return UNIFORM[1]
    return "something else"


def nan_behind_mask(adapter, settings: Settings) -> Result:
    """NaN or Inf in x after position i (behind the causal mask), or in the
    padding (behind a key-padding mask), leaves the earlier rows as they were."""
    id, title = "NaN behind the mask", "a NaN or Inf behind the mask changes nothing"
    dtype, tol = settings.working, settings.tol
    from hypothesis import strategies as st

    kinds = ("causal", "padding") if adapter.takes_mask else ("causal",)

    def check(case):
        problem, (position, poison, kind) = case
        i = position % (problem.T - 1)
        inputs = problem.inputs()
        if kind == "padding":
            *batch, T, _ = inputs.x.shape
            keep = np.arange(T) < i + 1
            inputs = inputs.replace(
                mask=np.broadcast_to(keep, (*batch, 1, 1, T)).copy()
            )
        x = inputs.x.copy()
        x[..., i + 1 :, :] = poison
        clean, poisoned = (
            adapter.run(inputs, dtype),
            adapter.run(inputs.replace(x=x), dtype),
        )
        return agree_up_to(
            clean, poisoned, i, tol, f"after {poison} from position {i + 1}"
        )

    strategy = cases(
        problems(adapter, T=(2, 8)),
        st.integers(0, 6),
        st.sampled_from(POISONS),
        st.sampled_from(kinds),
    )

    def where(case):
        position, poison, kind = case.extra
        i = position % (case.problem.T - 1)
        return f", {poison} in x after position {i} (behind the {kind} mask)"

    found = search(strategy, check, settings)
    if found.case is None:
        return passed(id, title, found, "earlier rows unchanged")
    if found.finding.raised:
        return failed(id, title, found, where=where)
    return failed(
        id, title, found, leak_of(adapter, found.case, dtype, tol), where=where
    )


def leak_of(adapter, case: Case, dtype: str, tol: str) -> str:
    """Where the poison got in: the future itself, when a finite change there
    reaches the earlier rows too (not causal); for q, k, v apart, the value
    or the key; else what a plain weighted sum does."""
    problem, (position, poison, kind) = case
    i = position % (problem.T - 1)
    behind = f"the {kind} mask"
    inputs = problem.inputs()
    if kind == "causal":
        before = adapter.run(inputs, dtype)
        after = adapter.run(changed_after(inputs, i, problem.seed), dtype)
        if agree_up_to(before, after, i, tol, "") is not None:
            return "not causal: a finite change in the future reaches earlier rows too"
    if adapter.level == "qkv" and kind == "causal":
        arrays = adapter.arrays(inputs, dtype)
        for name, word, why in (
            ("v", "value", "0 * NaN = NaN in weights @ v"),
            ("k", "key", "the mask is added to the scores: NaN + -inf = NaN"),
        ):
            poisoned = {**arrays, name: arrays[name].copy()}
            poisoned[name][..., i + 1 :, :] = poison
            args = {
                n: adapter.backend.from_numpy(a, dtype) for n, a in poisoned.items()
            }
            try:
                with quiet():
                    out = adapter.outcome(
                        adapter.call(args, None, problem.H, dtype), inputs
                    )
            except Exception:
                continue
            if not np.all(np.isfinite(out.out[..., : i + 1, :])):
                return f"a {poison} {word} behind {behind} reaches earlier rows: {why}"
    return (
        f"a NaN or Inf behind {behind} reaches earlier rows: a plain weights @ v "
        f"computes 0 * NaN = NaN (and a mask added to the scores NaN + -inf = NaN)"
    )
