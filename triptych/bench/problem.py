"""What every mode runs at one point of a sweep (`triptych bench` and
`--memory`): the shared fixture at one T, cast to the dtype, and NumPy's
answer on it, which every mode must match; for the training modes (--train),
the model and task of shared/train.py at the point's sizes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shared.config import Preset
from shared.dtypes import np_dtype
from shared.fixture import Fixture, make_fixture
from shared.train import TrainConfig

SEED = 0
"""The seed of every problem's fixture and of the GEMM peak's matrices."""


@dataclass(frozen=True)
class Problem:
    """What every mode runs at one point of the sweep.

    Attributes:
        fixture: the shared fixture, its arrays already cast to `dtype` (NumPy;
            bfloat16 through ml_dtypes). x is (B, T, C), w_* are (C, C).
        dtype: the dtype's name, e.g. "float32".
        device: "cpu" or "cuda" (NumPy always runs on the CPU).
    """

    fixture: Fixture
    dtype: str
    device: str

    @property
    def n_heads(self) -> int:
        """H."""
        return self.fixture.preset.n_heads

    @property
    def arrays(self) -> tuple[np.ndarray, ...]:
        """x, w_q, w_k, w_v, w_o, in the order multi_head_attention takes them."""
        return (self.fixture.x, *self.fixture.params.values())


def make_problem(
    T: int, *, d_model: int, n_heads: int, batch: int, dtype: str, device: str
) -> Problem:
    """The shared fixture of these sizes (seed SEED), cast to dtype."""
    preset = Preset(
        f"bench-T{T}",
        d_model=d_model,
        n_heads=n_heads,
        seed=SEED,
        seq_len=T,
        batch=(batch,),
    )
    fixture = make_fixture(preset).astype(np_dtype(dtype))
    return Problem(fixture, dtype, device)


def reference_outputs(problem: Problem) -> tuple[np.ndarray, np.ndarray]:
    """NumPy's (out, weights) on the problem: what every mode must match."""
    import impl_numpy

    out, weights = impl_numpy.multi_head_attention(*problem.arrays, problem.n_heads)
    return np.asarray(out), np.asarray(weights)


def blockwise_outputs(problem: Problem) -> tuple[np.ndarray, None]:
    """NumPy's blockwise out on the problem (no weights): what every mode of
    `triptych bench --scaling` must match, where the naive weights would not
    fit in memory (tests/test_blockwise.py holds it to the float64 oracle)."""
    import impl_numpy

    out, _ = impl_numpy.multi_head_blockwise_attention(*problem.arrays, problem.n_heads)
    return np.asarray(out), None


TRAIN_LAYERS = 2
"""L of the model a training mode trains (shared.train's default)."""


def train_vocab(T: int) -> int:
    """V of that model: 64 (shared.train's default), or T/2 where the task
    needs more (a period draws up to T/2 distinct tokens)."""
    return max(64, T // 2)


def train_config(problem: Problem) -> TrainConfig:
    """The model and task a training mode trains at this point: the point's
    T, C, H and batch, TRAIN_LAYERS layers, train_vocab(T) tokens, one batch.

    Raises:
        ValueError: T is below 4 (the task needs a period and its repeat).
    """
    preset = problem.fixture.preset
    return TrainConfig(
        vocab=train_vocab(preset.T),
        seq_len=preset.T,
        d_model=preset.d_model,
        n_heads=preset.n_heads,
        n_layers=TRAIN_LAYERS,
        batch=preset.batch[0],
        steps=1,
        held_out=1,
    )
