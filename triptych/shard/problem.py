"""The problem `triptych shard` and the sharded tests run: seeded NumPy inputs
at one size, and the runs (a strategy on N devices) asked of a backend."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from shared.hostile import with_partly_infinite_value

PARAMS = ("w_q", "w_k", "w_v", "w_o")
BIASES = ("b_q", "b_k", "b_v", "b_o")


def plural(n: int, one: str, many: str) -> str:
    """'1 device', '2 devices'."""
    return f"{n} {one if n == 1 else many}"


@dataclasses.dataclass(frozen=True)
class Problem:
    """One attention problem: x (*batch, T, C), H heads, in `dtype`.

    `padded`: a key-padding mask (batch >= 1): item 0 hides its first 3 keys
    (so its first 3 queries have nothing to attend), the others their last
    T // 3 (a shorter sequence).

    `poisoned`: a position j whose value overflows in its first feature only
    and stays finite in the others, its query and key finite: the partly
    non-finite value that the NaN policy must keep from every row that does not
    attend it (rows before j), while every row that does turns NaN
    (docs/contract.md). A whole row of NaN would hide a device that asks "is
    any entry finite?" where it must ask "is every entry finite?".
    """

    T: int
    C: int = 64
    H: int = 8
    batch: tuple[int, ...] = ()
    dtype: str = "float64"
    padded: bool = False
    seed: int = 0
    poisoned: int | None = None

    def inputs(self) -> dict[str, Any]:
        """x, the weights and biases (float64) and keep ((*batch, T) bool or None)."""
        rng = np.random.default_rng(self.seed)
        arrays: dict[str, Any] = {
            "x": rng.standard_normal((*self.batch, self.T, self.C))
        }
        for name in PARAMS:
            arrays[name] = rng.standard_normal((self.C, self.C)) / np.sqrt(self.C)
        for name in BIASES:
            arrays[name] = 0.1 * rng.standard_normal(self.C)
        arrays["keep"] = self.keep()
        if self.poisoned is not None:
            weights = {name: arrays[name] for name in PARAMS}
            arrays["x"], weights = with_partly_infinite_value(
                arrays["x"], weights, self.poisoned, "inf", "zero", self.dtype
            )
            arrays.update(weights)
        return arrays

    def keep(self) -> np.ndarray | None:
        """The key-padding keep array (*batch, T), or None."""
        if not self.padded:
            return None
        positions = np.arange(self.T)
        keep = np.broadcast_to(positions < self.T - self.T // 3, (*self.batch, self.T))
        keep = keep.copy()
        keep.reshape(-1, self.T)[0] = positions >= 3  # item 0: padded on the left
        return keep

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"batch": list(self.batch)}

    @classmethod
    def from_dict(cls, fields: dict[str, Any]) -> Problem:
        return cls(**fields | {"batch": tuple(fields["batch"])})


@dataclasses.dataclass(frozen=True)
class Run:
    """One strategy ("heads" or "sequence") on N devices, on one problem."""

    strategy: str
    devices: int
    problem: Problem

    def as_dict(self) -> dict[str, Any]:
        return dict(
            strategy=self.strategy, devices=self.devices, problem=self.problem.as_dict()
        )

    @classmethod
    def from_dict(cls, fields: dict[str, Any]) -> Run:
        return cls(
            fields["strategy"], fields["devices"], Problem.from_dict(fields["problem"])
        )
