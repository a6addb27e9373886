"""The rows a mask and a window leave empty (a query that may attend no
key), judged the same way by every property: by the policy the target
follows there (zeros, NaN, or the uniform mean over the keys, as a large
negative fill gives), never as a wrong value. `fully masked rows` says which
policy (and the profile whether it is a NOTE); the other properties compare
the rows that attend with the oracle and accept any known policy in the
others (`agree_rows`).
"""

from __future__ import annotations

import numpy as np

from triptych.check import mistakes
from triptych.check.problems import Inputs
from triptych.check.properties.search import Finding, agree, compare

UNIFORM = ("uniform over all T keys", "uniform over the keys up to i")
"""The policies beside zeros and NaN: JAX's and flax's (masked scores a large
negative number, so a fully masked row is a row of equal scores), and the same
with the causal mask kept."""


def empty_rows(adapter, inputs: Inputs) -> np.ndarray:
    """The rows of out (at the adapter's level) whose query may attend nothing."""
    attends = inputs.allowed().any(axis=-1)  # (..., H, T)
    return ~attends if adapter.level == "qkv" else ~attends.any(axis=-2)


def policy_of(adapter, inputs: Inputs, got, dtype: str, tol: str) -> str:
    """Which policy the empty rows of out (and of the weights) follow: 'zeros',
    'NaN', one of UNIFORM, 'something else', or 'A (out), B (weights)'."""
    w = {**inputs.w, "w_q": np.zeros_like(inputs.w["w_q"])}  # every score 0
    flat = inputs.replace(w=w, mask=None, variant=unbiased(inputs.variant))
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


def unbiased(variant):
    """The variant with no score bias (ALiBi off): the uniform mean a large
    negative fill gives is over the keys, whatever bias the scores had,
    since the fill replaces the biased score."""
    return variant if variant is None else variant._replace(alibi=False)


def known(policy_text: str) -> bool:
    """Whether every part of `policy_of`'s text is a known policy."""
    parts = [part.split(" (")[0] for part in policy_text.split(", ")]
    return all(part in ("zeros", "NaN", *UNIFORM) for part in parts)


def agree_rows(adapter, inputs: Inputs, got, want, dtype: str, tol) -> Finding | None:
    """`agree` on the rows that may attend a key; the rows the mask and the
    window leave empty pass where they follow a known policy (zeros, NaN,
    the uniform mean: `fully masked rows` judges which), else a Finding."""
    empty = empty_rows(adapter, inputs)
    if not empty.any():
        return agree(got, want, tol)
    attends = inputs.allowed().any(axis=-1)
    found = agree(got, want, tol, ~empty, attends)
    if found is not None:
        return found
    policy = policy_of(adapter, inputs, got, dtype, tol)
    return None if known(policy) else Finding(f"fully masked rows give {policy}")
