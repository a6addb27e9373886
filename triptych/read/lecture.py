"""What the lecture's chapters measure when the page is built: chapter 0's
stages (impl_*/buildup.py), what each framework adds (impl_*/extras.py), the
fused forms at the lesson's end, each run in every backend on the page's
model and sentence and compared with a float64 oracle; and the answer of
"predict the stripe", from the oracle's weights.

Which extras function is measured against what is said here once, by the
function's name (DEMOS); a backend that has no function of that name shows
the chapter's `absent` words in its cell instead.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from shared import registry
from shared.reference import reference_steps
from triptych.read.values import agreement

STAGES = (
    "average_loop",
    "average_matmul",
    "average_softmax",
    "dot_product",
    "scaled",
    "one_head",
    "reversed_past",
)
"""impl_*/buildup.py's stages, in order: each is measured against the one
before it (its last rows, for a stage that returns fewer) and against the
oracle of what it computes (ORACLE_OF)."""
SAME = ("average_matmul", "average_softmax", "one_head", "reversed_past", "fused")
"""The rows that must equal what they are read against (the stage before, or
the lesson), within the tolerance; stages 4 and 5 change it on purpose."""
ORACLE_OF = {
    "average_loop": "average",
    "average_matmul": "average",
    "average_softmax": "average",
    "dot_product": "unscaled",
    "scaled": "out",
    "one_head": "out",
    "reversed_past": "last",
}


@dataclass(frozen=True)
class Inputs:
    """The page's model in one backend's arrays: x (T, C), the one-head
    lesson's (C, D) projections, the layer's (C, C) ones, and H."""

    x: object
    head: tuple
    w_q: object
    w_k: object
    w_v: object
    w_o: object
    n_heads: int


@dataclass(frozen=True)
class Demo:
    """An extras function measured: what it gives, how it is called, and the
    oracle's array it is compared with (its key in `oracles`)."""

    what: str
    run: Callable[[object, Inputs], object]
    oracle: str
    beside_lesson: bool = False  # read against the backend's own lesson too
    ours: bool = True  # our code: beyond the tolerance makes the exit code 1


DEMOS = {
    "every_head": Demo(
        "every head's weights (H, T, T)",
        lambda m, a: m.every_head(a.x, a.w_q, a.w_k, a.w_v, a.n_heads)[1],
        "heads",
    ),
    "gradient": Demo(
        "dL/dw_q (C, D), L = out.sum()", lambda m, a: m.gradient(a.x, *a.head), "grad"
    ),
    "trace": Demo(
        "the program traced (jaxpr)", lambda m, a: str(m.trace(a.x, *a.head)), ""
    ),
    "compiled": Demo(
        "out (T, D), jitted", lambda m, a: m.compiled()(a.x, *a.head)[0], "out"
    ),
    "compiled_heads": Demo(
        "every head's weights (H, T, T), jitted",
        lambda m, a: m.compiled_heads()(
            a.x, a.w_q, a.w_k, a.w_v, a.w_o, n_heads=a.n_heads
        )[1],
        "heads",
    ),
    "call_layer": Demo(
        "out (T, C) of the layer",
        lambda m, a: m.call_layer(
            m.as_layer(a.w_q, a.w_k, a.w_v, a.w_o, a.n_heads), a.x
        )[0],
        "layer",
    ),
    "fused": Demo(  # the framework's own function: shown, never our failure
        "out (T, D), fused",
        lambda m, a: m.fused(a.x, *a.head),
        "out",
        beside_lesson=True,
        ours=False,
    ),
}


@dataclass(frozen=True)
class Measured:
    """One backend's result of a stage or an extras function.

    Attributes:
        backend: its name.
        error: largest |value - oracle|; within: inside the dtype's tolerance.
        before: largest |value - what it is read against| (the stage before,
            or for `fused` the lesson), None where there is none.
        same: whether `before` is within the tolerance.
        text: a program printed (a jaxpr) where it gives no array.
    """

    backend: str
    error: float | None = None
    within: bool = True
    before: float | None = None
    same: bool | None = None
    text: str | None = None


def oracles(view, backend_of) -> dict[str, np.ndarray]:
    """What each stage and extras function should give, in float64 loops
    (shared.reference), the gradient from the reference backend's hand-written
    backward in float64 (checked against finite differences by the suite)."""
    f, H = view.fixture, view.fixture.preset.n_heads
    head = view.single_weights()
    one = reference_steps(f.x, *head)
    multi = reference_steps(f.x, f.w_q, f.w_k, f.w_v, f.w_o, H)
    v = one[1]["v"]
    T, D = v.shape
    average = np.array(
        [[math.fsum(v[: i + 1, d]) / (i + 1) for d in range(D)] for i in range(T)]
    )
    raw = one[3]["scores"]
    unscaled = np.zeros((T, D))
    for i in range(T):
        exp = [math.exp(s - max(raw[i, : i + 1])) for s in raw[i, : i + 1]]
        total = math.fsum(exp)
        for d in range(D):
            unscaled[i, d] = math.fsum(e / total * v[j, d] for j, e in enumerate(exp))
    numpy = backend_of(registry.reference().name)
    grads = numpy.single_head_attention_backward(f.x, *head, np.ones((T, D)))
    return {
        "average": average,
        "unscaled": unscaled,
        "out": one[7]["out"],
        "last": one[7]["out"][-1:],
        "weights": one[6]["weights"],
        "heads": multi[6]["weights"],
        "layer": multi[7]["out"],
        "grad": np.asarray(grads["w_q"], dtype=np.float64),
        "masked": one[5]["scores"],
    }


def inputs(backend, view, dtype: str) -> Inputs:
    """The page's model as `backend`'s arrays in `dtype`."""
    f = view.fixture
    cast = [backend.from_numpy(a, dtype) for a in (f.x, f.w_q, f.w_k, f.w_v, f.w_o)]
    head = tuple(backend.from_numpy(a, dtype) for a in view.single_weights())
    return Inputs(cast[0], head, *cast[1:], f.preset.n_heads)


def module(name: str, file: str):
    """impl_<name>.<file>: one of the backend's parallel files, or None for a
    backend that has no such file (its cells say so)."""
    package = registry.get(name).package
    if importlib.util.find_spec(f"{package}.{file}") is None:
        return None
    return importlib.import_module(f"{package}.{file}")


def buildup(name: str, backend, given: Inputs, expected: dict, dtype: str) -> dict:
    """{stage: Measured} of one backend: each stage from the one before and
    from its oracle."""
    stages, found, previous = module(name, "buildup"), {}, None
    for stage in STAGES if stages is not None else ():
        value = np.asarray(
            backend.to_numpy(getattr(stages, stage)(given.x, *given.head))
        )
        before = None if previous is None else previous[-len(value) :]
        oracle = expected[ORACLE_OF[stage]]
        found[stage] = measured(name, value, oracle, dtype, before)
        previous = value
    return found


def extras(name: str, backend, given: Inputs, expected: dict, dtype: str) -> dict:
    """{function: Measured} of the backend's extras.py, for the DEMOS it has;
    a fused form is read against the backend's own lesson too."""
    adds, found = module(name, "extras"), {}
    lesson = module(name, "lesson")
    for function, demo in DEMOS.items():
        if adds is None or not hasattr(adds, function):
            continue
        value = demo.run(adds, given)
        if isinstance(value, str):
            found[function] = Measured(name, text=value)
            continue
        value = np.asarray(backend.to_numpy(value))
        against = None
        if demo.beside_lesson:
            out, _ = lesson.single_head_attention(given.x, *given.head)
            against = np.asarray(backend.to_numpy(out))
        found[function] = measured(name, value, expected[demo.oracle], dtype, against)
    return found


def measured(name, value, oracle, dtype, before=None) -> Measured:
    """A value's distance from its oracle and from what it is read against."""
    value = value.astype(np.float64)
    error, within = agreement(value, oracle, dtype)
    if before is None:
        return Measured(name, error, within)
    before = before.astype(np.float64)
    distance, same = agreement(value, before, dtype)
    return Measured(name, error, within, distance, same)


@dataclass(frozen=True)
class Stripe:
    """The answer to "predict the stripe": for each row whose token came
    before, the column after that earlier place (the copy an induction head
    attends), the column the head attends most, and its weight there."""

    row: int
    expected: int
    attended: int
    weight: float


def stripe(tokens: list[str], weights: np.ndarray) -> list[Stripe]:
    """Each row i whose token occurred at an earlier j < i: the expected
    column j + 1 (the latest such j), against the head's weights (T, T)."""
    found = []
    for i, token in enumerate(tokens):
        earlier = [j for j in range(i) if tokens[j] == token]
        if not earlier:
            continue
        expected = earlier[-1] + 1
        attended = int(np.argmax(weights[i]))
        found.append(Stripe(i, expected, attended, float(weights[i, expected])))
    return found
