"""What every backend's training shares (impl_*/train.py, `triptych train`):
the model's sizes, the induction task, the initial parameters and the batches,
all drawn in float64 from one seeded NumPy generator and cast by each backend,
and the four step comments of a training step. docs/train.md tells the story.

The model is attention only: token and learned position embeddings, L layers
of multi-head causal self-attention each added to the residual stream, an
unembedding and the cross-entropy of every next token.

The task: each sequence is k distinct tokens drawn at random from the
vocabulary, repeated to fill T, with its own period k between T/4 and T/2. A
token of a repeat is predictable only by finding where the token before it
came last and copying what came next (an induction head, fed by a
previous-token head): k differs from sequence to sequence, so no position can
stand in for it. "Induction accuracy" counts the right guesses at positions
k .. T-2, whose token has come before.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from shared.dtypes import dtype_key
from shared.tolerances import DERIVED_MULTIPLE, tolerance
from shared.validation.variants import check_heads

TRAIN_STEPS = (
    "forward: embed, L attention layers on the residual stream, unembed",
    "loss: cross-entropy of every next token",
    "backward: the gradient of the loss for every parameter",
    "Adam: step every parameter by its gradient's running moments",
)
"""The training step's comments, `# [1] forward: ...` to `# [4] Adam: ...`,
word for word and in this order in every impl_*/train.py."""

LAYER_WEIGHTS = ("w_q", "w_k", "w_v", "w_o")


def train_step_comment(number: int) -> str:
    """'# [2] loss: cross-entropy of every next token' for number 2."""
    return f"# [{number}] {TRAIN_STEPS[number - 1]}"


@dataclass(frozen=True)
class TrainConfig:
    """The model, the task and Adam's settings of one training run.

    Attributes:
        vocab: V, the number of distinct tokens; at least seq_len / 2.
        seq_len: T, at least 4: a period of at least 2 tokens, repeated.
        d_model, n_heads, n_layers: C, H (dividing C) and L.
        batch: B, sequences per step.
        steps: how many Adam steps.
        lr, b1, b2, eps: Adam's step size, moment decays and epsilon.
        seed: of the one generator behind the parameters and every batch.
        held_out: sequences on which induction accuracy is measured.
    """

    vocab: int = 64
    seq_len: int = 32
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    batch: int = 32
    steps: int = 350
    lr: float = 4e-3
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    seed: int = 0
    held_out: int = 256

    def __post_init__(self) -> None:
        check_train_config(self)

    @property
    def param_names(self) -> tuple[str, ...]:
        """Every parameter's name, in the order of `init_params`."""
        layers = tuple(
            f"layer{layer}.{w}" for layer in range(self.n_layers) for w in LAYER_WEIGHTS
        )
        return ("embed", "pos", *layers, "unembed")


def check_train_config(config: TrainConfig) -> None:
    """Raise ValueError, one line, for sizes the task or the model cannot use."""
    positive = ("steps", "batch", "d_model", "n_heads", "n_layers", "held_out")
    for name in positive:
        if getattr(config, name) < 1:
            raise ValueError(f"{name} must be at least 1, got {getattr(config, name)}")
    T, V = config.seq_len, config.vocab
    if T < 4:
        raise ValueError(
            f"seq_len must be at least 4 (a period of 2 tokens or more, then its "
            f"repeat), got {T}"
        )
    if V < T // 2:
        raise ValueError(
            f"vocab {V} is too small for seq_len {T}: a period draws up to "
            f"{T // 2} distinct tokens, so vocab must be at least {T // 2}"
        )
    if not config.lr > 0 or not 0 <= config.b1 < 1 or not 0 <= config.b2 < 1:
        raise ValueError("Adam needs lr > 0 and 0 <= b1, b2 < 1")
    if config.seed < 0:
        raise ValueError(f"seed must be at least 0, got {config.seed}")
    check_heads(config.d_model, config.n_heads)


def periods(T: int) -> tuple[int, int]:
    """The shortest and the longest period of a sequence of length T."""
    return max(2, T // 4), T // 2


def induction_sequences(rng: np.random.Generator, n: int, T: int, V: int):
    """(n, T) int64 tokens: each row k distinct tokens of range(V), k drawn
    from `periods(T)`, repeated to fill T."""
    shortest, longest = periods(T)
    first = rng.random((n, V)).argsort(axis=-1)[:, :longest]  # (n, T/2), distinct
    k = rng.integers(shortest, longest + 1, size=n)  # (n,): each row's period
    position = np.arange(T) % k[:, None]  # (n, T): t mod k
    return np.take_along_axis(first, position, axis=-1)  # (n, T)


@dataclass(frozen=True)
class Task:
    """What every backend trains on, in float64 and int64 NumPy arrays.

    Attributes:
        config: the run's settings.
        params: the initial parameters by name (TrainConfig.param_names):
            embed (V, C), pos (T, C), layer<l>.w_q, w_k, w_v, w_o (C, C) in
            the (in, out) layout, unembed (C, V).
        held_out: (held_out, T) tokens for the induction accuracy.
        batch_state: the generator's state where the batches begin.
    """

    config: TrainConfig
    params: dict[str, np.ndarray]
    held_out: np.ndarray
    batch_state: dict

    def batches(self) -> Iterator[np.ndarray]:
        """The (B, T) tokens of each step in turn, drawn as they are asked
        for (a long run never holds them all), the same on every call."""
        rng = np.random.default_rng(0)
        rng.bit_generator.state = self.batch_state
        c = self.config
        for _ in range(c.steps):
            yield induction_sequences(rng, c.batch, c.seq_len, c.vocab)


def make_task(config: TrainConfig) -> Task:
    """Draw the initial parameters, the held-out sequences, then (as the
    steps ask for them, `Task.batches`) the batches, in that order, from
    `numpy.random.default_rng(config.seed)`: the first k batches of a run are
    the same for any number of steps >= k.

    Embeddings are N(0, 1) (a token and its position add to about unit
    entries); projections and the unembedding N(0, 1/C), as in
    `shared.make_fixture`, so scores and logits start about unit size.
    """
    rng = np.random.default_rng(config.seed)
    V, T, C = config.vocab, config.seq_len, config.d_model
    shapes = {"embed": (V, C), "pos": (T, C), "unembed": (C, V)}
    params = {}
    for name in config.param_names:
        shape = shapes.get(name, (C, C))
        scale = 1.0 if name in ("embed", "pos") else 1 / np.sqrt(C)
        params[name] = rng.standard_normal(shape) * scale
    held_out = induction_sequences(rng, config.held_out, T, V)
    return Task(config, params, held_out, rng.bit_generator.state)


def period_of(tokens) -> np.ndarray:
    """(n,) the period k of each sequence of `tokens` (n, T): where its first
    token comes again."""
    return (tokens[:, 1:] == tokens[:, :1]).argmax(axis=-1) + 1


def induction_accuracy(logits, tokens) -> float:
    """The share of right guesses where only induction can guess: the
    predictions at positions k .. T-2 of each sequence (period k), whose
    token has come before, of the tokens that follow them.

    Args:
        logits: (n, T, V) in any float dtype (a NumPy array).
        tokens: (n, T) induction sequences.
    """
    T = tokens.shape[-1]
    guesses = np.asarray(logits)[:, :-1].argmax(axis=-1)  # (n, T-1): of t + 1
    inducible = np.arange(T - 1) >= period_of(tokens)[:, None]  # (n, T-1)
    return float((guesses == tokens[:, 1:])[inducible].mean())


# The tolerance of a training run (docs/train.md, "Step for step"). Two correct
# backends differ by rounding only, and Adam amplifies it: its step
# lr * m / (sqrt(v) + eps) turns a gradient entry g near eps into a step of
# about lr * g / (|g| + eps), whose slope eps / (|g| + eps)^2 reaches 1 / eps,
# so a rounding difference of 1e-18 in such an entry moves a parameter by
# lr * 1e-10 in one step; the steps after carry it on, and the sharp turns of
# learning amplify it further. That growth depends on the run, so each run
# measures its own: a shadow of NumPy's run whose every parameter moves by one
# unit in the last place before every step (`rounding_kick`) differs from it by
# rounding alone. A pair of backends agrees at step t when its largest
# parameter difference is at most SHADOW_MULTIPLES[dtype] times the largest
# shadow drift up to step t, and never less than the dtype's atol.
#
# float64: DERIVED_MULTIPLE, the suite's multiple for a measured rounding
# error; on the default model (4 seeds) the backends' difference was at most
# 0.93 times the shadow's drift. float32, the measured band: there the
# backends reached 3.5 times the drift in the first measurements (a float32 sum
# over B·T positions rounds a gradient by more than one unit of each parameter
# moves it; 1.6 times on today's task), so the multiple is 16, a margin of
# about 4 over the worst measured (docs/train.md).
SHADOW_MULTIPLES = {"float64": DERIVED_MULTIPLE, "float32": 16.0}


def rounding_kick(params, rng) -> None:
    """Move every parameter one unit in the last place, up or down at random
    (in place): what one more rounding of each could have done."""
    for name, w in params.items():
        up = rng.random(w.shape) < 0.5
        params[name][...] = np.nextafter(
            w, np.where(up, np.inf, -np.inf).astype(w.dtype)
        )


def training_tolerance(shadow_drift: float, dtype) -> float:
    """The largest parameter difference allowed at a step, given the largest
    drift of the shadow run so far (see above)."""
    multiple = SHADOW_MULTIPLES[dtype_key(dtype)]
    return max(tolerance(dtype).atol, multiple * shadow_drift)
