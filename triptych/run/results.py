"""What `triptych run` computes: every backend on one fixture, the float64 oracle
on the same fixture, entropy measured two ways, and every comparison.

Everything here returns NumPy arrays and plain data; printing lives in
`triptych.run.report`, figures in `triptych.run.plots`.

Entropy, two ways. Row i of a causal head may attend to the i + 1 keys 0..i,
so its entropy is at most log(i + 1) (the uniform row over those keys).

- `over_log_T`, the original build script's measure: the head's mean row
  entropy divided by log(T). Rows near the top can never reach log(T), so even
  a perfectly uniform causal head scores below 1.
- `over_causal`, the honest one: the mean over rows i = 1..T-1 of
  entropy(row i) / log(i + 1); a uniform causal head scores exactly 1. Row 0
  is left out: it has exactly one key, its entropy is always 0 and so is its
  maximum, and 0 / 0 has no meaning.

With T = 1 neither measure exists (log 1 = 0 and no row has a choice); both
are None.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from shared.config import Preset
from shared.fixture import Fixture
from shared.golden import oracle_results
from shared.reference import reference_single_head
from shared.tolerances import Tolerance, is_close, max_abs_diff, tolerance

ORACLE = "oracle"

QUANTITIES: dict[str, str] = {
    "single_weights": "1-head weights",
    "single_out": "1-head output",
    "multi_weights": "H-head weights",
    "multi_out": "H-head output",
    "entropy": "entropy",
}
"""What is compared, by key, with the label the tables print."""


@dataclass(frozen=True)
class EntropySummary:
    """Per-head entropy of one backend's multi-head weights.

    Attributes:
        mean_nats: (H,) mean over the T rows of each row's entropy, in nats.
        over_log_T: (H,) mean_nats / log(T), the original build script's
            measure; None if T = 1.
        over_causal: (H,) mean over rows 1..T-1 of entropy / log(i + 1);
            None if T = 1.
    """

    mean_nats: np.ndarray
    over_log_T: np.ndarray | None  # noqa: N815 (T, the sequence length)
    over_causal: np.ndarray | None


def summarize_entropy(rows: np.ndarray) -> EntropySummary:
    """Both normalized entropies of (H, T) per-row entropies in nats."""
    rows = np.asarray(rows, dtype=np.float64)
    T = rows.shape[-1]
    mean_nats = rows.mean(axis=-1)  # (H,)
    if T == 1:
        return EntropySummary(mean_nats, None, None)
    causal_max = np.log(np.arange(1, T + 1))  # (T,), log(i + 1); row 0 has 0
    over_causal = (rows[:, 1:] / causal_max[1:]).mean(axis=-1)  # (H,), rows 1..T-1
    return EntropySummary(mean_nats, mean_nats / math.log(T), over_causal)


def causal_max_mean(T: int) -> float:
    """The largest mean row entropy a causal head can have: mean of log(i + 1)."""
    return float(np.log(np.arange(1, T + 1)).mean())


@dataclass(frozen=True)
class Outcome:
    """What one backend (or the oracle) computed, as NumPy arrays.

    Attributes:
        name: "numpy", "torch", "jax" or "oracle".
        device: where it ran, as the framework names it ("cpu", "cuda:0").
        dtype: the dtype it computed in.
        shapes: the shape of each result as the framework reports it, and of x.
        arrays: by QUANTITIES key: single_weights (T, T), single_out (T, C),
            multi_weights (H, T, T), multi_out (T, C), entropy (H, T) in nats.
    """

    name: str
    device: str
    dtype: str
    shapes: dict[str, tuple[int, ...]]
    arrays: dict[str, np.ndarray]

    @property
    def entropy(self) -> EntropySummary:
        """Per-head entropy of the multi-head weights, both ways."""
        return summarize_entropy(self.arrays["entropy"])


def device_of(array) -> str:
    """Where a NumPy, torch or JAX array lives: 'cpu', 'cuda:0', 'gpu:0'."""
    devices = getattr(array, "devices", None)
    if callable(devices):  # JAX: a set of jax.Device
        device = next(iter(devices()))
        return f"{device.platform}:{device.id}"
    return str(getattr(array, "device", "cpu"))  # torch.device, or NumPy's 'cpu'


def single_head(fixture: Fixture, head: int | None = None):
    """The w_q, w_k, w_v and biases by name that single_head_attention takes:
    with `head` (the trained model's), that head's columns (D = C / H), as lab
    and read take them; else `Fixture.single_head` (a preset: the projections
    whole, D = C, as the original build script and the golden files; a
    checkpoint's variant: its first head)."""
    if head is None:
        return fixture.single_head
    from triptych.common.trained import head_columns

    return dict(
        zip(("w_q", "w_k", "w_v"), head_columns(fixture, head), strict=True)
    ), {}


def run_backend(
    name: str, backend, fixture: Fixture, dtype: str, head: int | None = None
) -> Outcome:
    """Single-head, multi-head and entropy in `backend` (a module impl_<name>).

    The single head is `single_head(fixture, head)`; the multi-head call uses
    the preset's n_heads, w_o and the fixture's variant; both use the
    fixture's biases, if it has any.
    """

    def cast(arrays):
        return {n: backend.from_numpy(a, dtype) for n, a in arrays.items()}

    x, w_q, w_k, w_v, w_o = (
        backend.from_numpy(a, dtype) for a in (fixture.x, *fixture.params.values())
    )
    biases = cast(fixture.biases)
    single_weights, single_biases = (cast(a) for a in single_head(fixture, head))
    single_out, single_weights = backend.single_head_attention(
        x, *single_weights.values(), biases=single_biases
    )
    variant = fixture.variant
    if variant is not None:
        variant = dataclasses.replace(variant, **cast(variant.arrays))
    multi_out, multi_weights = backend.multi_head_attention(
        x, w_q, w_k, w_v, w_o, fixture.preset.n_heads, biases=biases, variant=variant
    )
    entropy = backend.attention_entropy(multi_weights)  # (H, T)
    results = {
        "single_weights": single_weights,
        "single_out": single_out,
        "multi_weights": multi_weights,
        "multi_out": multi_out,
        "entropy": entropy,
    }
    return Outcome(
        name=name,
        device=device_of(multi_out),
        dtype=dtype,
        shapes={"x": _shape(x), **{key: _shape(a) for key, a in results.items()}},
        arrays={key: backend.to_numpy(a) for key, a in results.items()},
    )


def run_oracle(fixture: Fixture, head: int | None = None) -> Outcome:
    """The same results from the float64 loops of `shared.reference`."""
    golden = oracle_results(fixture)
    if head is not None:  # one head of the trained model, not the whole
        weights, biases = single_head(fixture, head)
        golden["single_out"], golden["single_weights"] = reference_single_head(
            fixture.x, *weights.values(), biases=biases
        )
    results = {
        "single_weights": golden["single_weights"],
        "single_out": golden["single_out"],
        "multi_weights": golden["multi_weights"],
        "multi_out": golden["multi_out"],
        "entropy": golden["multi_entropy"],
    }
    return Outcome(
        name=ORACLE,
        device="cpu",
        dtype="float64",
        shapes={"x": _shape(fixture.x), **{k: _shape(a) for k, a in results.items()}},
        arrays=results,
    )


@dataclass(frozen=True)
class Comparison:
    """One quantity of one backend against the oracle or another backend.

    `passed` is `shared.tolerances.is_close(actual, expected, dtype)`:
    |actual - expected| <= atol + rtol * |expected| everywhere.
    """

    actual: str
    expected: str
    quantity: str
    max_abs_diff: float
    passed: bool


def compare(outcomes: list[Outcome], oracle: Outcome, dtype: str) -> list[Comparison]:
    """Each backend against the oracle, then each pair of backends, every quantity."""
    pairs = [(outcome, oracle) for outcome in outcomes]
    pairs += list(itertools.combinations(outcomes, 2))
    return [
        Comparison(
            actual=a.name,
            expected=b.name,
            quantity=key,
            max_abs_diff=max_abs_diff(a.arrays[key], b.arrays[key]),
            passed=is_close(a.arrays[key], b.arrays[key], dtype),
        )
        for a, b in pairs
        for key in QUANTITIES
    ]


@dataclass(frozen=True)
class RunResults:
    """Everything one `triptych run` computed, ready to print, plot and save.

    Attributes:
        preset: the preset after the command line's overrides.
        overrides: the options that changed it, by Preset field.
        dtype: the dtype every backend computed in.
        outcomes: one per backend, in the order asked for.
        oracle: the float64 oracle on the same fixture.
        comparisons: see `compare`.
        not_installed: backends that were not asked for by name and do not import.
        versions: `triptych.common.backends.versions()`.
        checkpoint: where the fixture came from when it is a real model's
            layer (`triptych.run.checkpoint.Checkpoint`), else None.
        trained: when the fixture is a layer of the trained model that ships
            with the project, `triptych.common.trained.layer_record` of it
            (the layer and what each head does), else None.
    """

    preset: Preset
    overrides: dict[str, object]
    dtype: str
    outcomes: list[Outcome]
    oracle: Outcome
    comparisons: list[Comparison]
    not_installed: list[str] = field(default_factory=list)
    versions: dict[str, str | None] = field(default_factory=dict)
    checkpoint: object = None
    trained: dict | None = None

    @property
    def tolerance(self) -> Tolerance:
        """The tolerance of `dtype` from `shared.tolerances`."""
        return tolerance(self.dtype)

    @property
    def failures(self) -> list[Comparison]:
        """The comparisons beyond the tolerance."""
        return [c for c in self.comparisons if not c.passed]

    @property
    def passed(self) -> bool:
        """True when every comparison is within the tolerance."""
        return not self.failures

    @property
    def labels(self) -> list[str]:
        """One label per position: the token, or its index for random inputs."""
        if self.preset.tokens is not None:
            return list(self.preset.tokens)
        return [str(i) for i in range(self.preset.T)]


def _shape(array) -> tuple[int, ...]:
    return tuple(int(n) for n in array.shape)
