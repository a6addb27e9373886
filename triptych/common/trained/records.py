"""A run's record of its parameters, saved with them, and a fresh run checked
against it.

`save` writes the parameters and, after each of RECORDED_STEPS, their SHA-256
and SAMPLES of them (`Record`); `compare` holds a fresh run's records to the
file's: the same bits where this machine's NumPy computes them, else within
the run's tolerance (`Comparison`, whose `verdict` `triptych train
--check-weights` prints).
"""

from __future__ import annotations

import hashlib
import json
import platform
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from shared.train import TrainConfig
from triptych.common.trained.model import FORMAT, TrainedModel

SAVE_COMMAND = (
    "triptych train --backends numpy --save-weights shared/fixtures/induction.npz"
)
CHECK_COMMAND = (
    "triptych train --backends numpy --check-weights shared/fixtures/induction.npz"
)
RECORDED_STEPS = (1, 10, 100)
"""The steps after which a saved run records its parameters' SHA-256 and
samples (and always the last): a run of 10 steps checks the first two."""
SAMPLES = 64
"""Entries of each parameter recorded at those steps, evenly spaced: what
another machine, whose NumPy rounds otherwise, compares within a tolerance."""


def digest(params: dict[str, np.ndarray]) -> str:
    """SHA-256 of every parameter's name, dtype, shape and bytes, by name."""
    h = hashlib.sha256()
    for name in sorted(params):
        a = np.ascontiguousarray(params[name])
        h.update(f"{name} {a.dtype.str} {a.shape}\n".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def samples(params: dict[str, np.ndarray]) -> dict[str, list[float]]:
    """SAMPLES entries of each parameter, evenly spaced over its flat index."""
    found = {}
    for name, a in sorted(params.items()):
        flat = np.asarray(a, dtype=np.float64).ravel()
        at = np.linspace(0, flat.size - 1, min(SAMPLES, flat.size)).astype(int)
        found[name] = flat[at].tolist()
    return found


@dataclass(frozen=True)
class Record:
    """NumPy's parameters after one step of a run, as a saved file keeps them:
    their SHA-256, their samples and the run's tolerance at that step."""

    step: int
    sha256: str
    samples: dict[str, list[float]]
    tolerance: float

    @classmethod
    def of(cls, step: int, params: dict, tolerance: float) -> Record:
        return cls(step, digest(params), samples(params), tolerance)


def save(
    path: Path,
    params: dict[str, np.ndarray],
    config: TrainConfig,
    records: list[Record],
    accuracy: float,
    command: str,
) -> None:
    """Write the parameters and the run's record as one .npz file."""
    meta = {
        "format": FORMAT,
        "config": asdict(config),
        "dtype": "float64",
        "trainer": "numpy",
        "steps": config.steps,
        "made_by": command,
        "induction_accuracy": accuracy,
        "records": [asdict(r) for r in records],
        "numpy": np.__version__,
        "machine": platform.machine(),
    }
    arrays = {name: np.asarray(w, dtype=np.float64) for name, w in params.items()}
    with open(path, "wb") as file:
        np.savez_compressed(file, meta=np.array(json.dumps(meta)), **arrays)


@dataclass(frozen=True)
class Comparison:
    """A fresh run's records against a saved file's, step by step.

    Attributes:
        steps: the steps compared (the file's recorded steps the run reached).
        same_bits: whether every compared step has the file's SHA-256.
        largest: per step, the largest |fresh - saved| over the samples (and
            at the file's last step, over every parameter).
        tolerance: per step, the fresh run's tolerance there.
    """

    steps: list[int]
    same_bits: bool
    largest: dict[int, float]
    tolerance: dict[int, float]

    @property
    def within(self) -> bool:
        return bool(self.steps) and all(
            self.largest[s] <= self.tolerance[s] for s in self.steps
        )

    def verdict(self) -> str:
        """One line: same bits, within the tolerance, or not."""
        steps = ", ".join(map(str, self.steps))
        if not self.steps:
            return "no recorded step reached: nothing compared"
        if self.same_bits:
            return f"the same bits as the saved weights after steps {steps} (SHA-256)"
        worst = max(self.steps, key=lambda s: self.largest[s] / self.tolerance[s])
        where = "within" if self.within else "BEYOND"
        return (
            f"other bits than the saved weights (this NumPy rounds otherwise), "
            f"{where} the run's tolerance after steps {steps}: largest difference "
            f"{self.largest[worst]:.3g} at step {worst}, tolerance "
            f"{self.tolerance[worst]:.3g}"
        )


def compare(
    records: list[Record], final: dict[str, np.ndarray] | None, saved: TrainedModel
) -> Comparison:
    """A fresh run (its records, and its last parameters) against `saved`.

    Raises:
        ValueError: the run's settings (other than its steps) are not the file's.
    """
    by_step = {r["step"]: r for r in saved.meta["records"]}
    fresh = {r.step: r for r in records}
    steps = [s for s in sorted(by_step) if s in fresh]
    largest, tolerance, same = {}, {}, True
    for step in steps:
        old, new = by_step[step], fresh[step]
        same = same and old["sha256"] == new.sha256
        largest[step] = max(
            float(np.max(np.abs(np.subtract(new.samples[k], old["samples"][k]))))
            for k in old["samples"]
        )
        tolerance[step] = new.tolerance
        if step == saved.config.steps and final is not None:
            largest[step] = max(
                largest[step],
                max(
                    float(np.max(np.abs(final[k] - saved.params[k])))
                    for k in saved.params
                ),
            )
    return Comparison(steps, same, largest, tolerance)


def settings_differ(config: TrainConfig, saved: TrainedModel) -> list[str]:
    """The settings, other than steps, in which a run is not the saved one's."""
    ours, theirs = asdict(config), asdict(saved.config)
    return [
        f"{k} {ours[k]} (the file's: {theirs[k]})"
        for k in ours
        if k != "steps" and ours[k] != theirs[k]
    ]
