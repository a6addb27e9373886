"""The trained model that ships with the project, and what its heads do.

`triptych train`'s induction model (shared/train.py: two layers of four heads,
d_model 64, vocabulary 64), trained by NumPy in float64 with the default
settings and saved in shared/fixtures/induction.npz (370 KB) by

    triptych train --backends numpy --save-weights shared/fixtures/induction.npz

and checked against a fresh run, bit for bit where this machine's NumPy
computes the same bits, by

    triptych train --backends numpy --check-weights shared/fixtures/induction.npz

(docs/train.md, "The shipped model"). `triptych lab`, `triptych read` and
`triptych run` show its attention by default (`--weights random`: the toy
sentence on random weights, as before).

The task knows only token ids; the words are names given to them here, so that
a class reads "cat" rather than 17. `SENTENCE` is eight distinct words said
twice: from its ninth token on, the model can predict each token only by
finding the token's first occurrence and copying what came next, the job of
an induction head. What each head does is measured (`head_roles`), never
written down: on the training task's 256 held-out sequences, the mean weight
each head puts on the key that a previous-token, an induction, a current-token
or a first-token head would attend.
"""

from __future__ import annotations

import functools
import hashlib
import json
import platform
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

import shared
from shared.config import Preset
from shared.fixture import Fixture
from shared.train import LAYER_WEIGHTS, TrainConfig, make_task, period_of

WEIGHTS = Path(shared.__file__).resolve().parent / "fixtures" / "induction.npz"
"""The shipped weights (a file of the shared package's data)."""

SAVED_AS = "shared/fixtures/induction.npz"
"""WEIGHTS as the repository names it."""

FORMAT = "triptych-weights/1"
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

VOCABULARY = (
    *("the", "cat", "sat", "on", "a", "mat", "and", "slept"),
    *("dog", "ran", "to", "park", "fox", "saw", "big", "red"),
    *("sun", "rose", "over", "hill", "bird", "sang", "in", "tree"),
    *("boy", "ate", "an", "apple", "girl", "read", "old", "book"),
    *("fish", "swam", "under", "boat", "cow", "gave", "warm", "milk"),
    *("king", "wore", "gold", "crown", "rain", "fell", "at", "night"),
    *("we", "found", "blue", "stone", "owl", "flew", "past", "moon"),
    *("she", "drew", "small", "house", "wind", "blew", "cold", "snow"),
)
"""A word for each of the model's 64 token ids: token i is VOCABULARY[i]."""

SENTENCE = ("the", "cat", "sat", "on", "a", "mat", "and", "slept") * 2
"""What the views show: eight distinct words, said twice (T = 16)."""

DEFAULT_LAYER = 1
"""The layer the views show by default: the induction heads."""

ROLE_THRESHOLD = 0.3
ROLE_OVER_CHANCE = 3.0
"""A head is a pattern's head when its mean weight on that pattern's key is at
least ROLE_THRESHOLD and at least ROLE_OVER_CHANCE times what a uniform causal
row gives one key over the same queries (0.05 to 0.13 here); row 0, which has
one key and no choice, counts for no pattern."""

PATTERNS = {
    "previous-token": "the token before",
    "induction": "the token after the current token's previous occurrence",
    "duplicate-token": "the current token's previous occurrence",
    "current-token": "the token itself",
    "first-token": "the first token",
}
"""Each pattern a head may follow, and the key it attends from query i."""


@dataclass(frozen=True)
class TrainedModel:
    """The shipped weights.

    Attributes:
        params: by name (shared.train.TrainConfig.param_names), float64.
        config: the settings of the run that made them.
        meta: the rest of the file's record (steps, hashes, samples, who made
            it and how).
    """

    params: dict[str, np.ndarray]
    config: TrainConfig
    meta: dict

    @property
    def n_layers(self) -> int:
        return self.config.n_layers

    def layer_weights(self, layer: int) -> tuple[np.ndarray, ...]:
        """w_q, w_k, w_v, w_o (C, C) of one layer."""
        return tuple(self.params[f"layer{layer}.{w}"] for w in LAYER_WEIGHTS)


@functools.cache
def load(path: Path = WEIGHTS) -> TrainedModel:
    """The weights saved at `path` (the shipped ones by default)."""
    with np.load(path, allow_pickle=False) as saved:
        meta = json.loads(str(saved["meta"][()]))
        params = {k: saved[k] for k in saved.files if k != "meta"}
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path}: not a {FORMAT} file")
    return TrainedModel(params, TrainConfig(**meta["config"]), meta)


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


# The model's forward, and what its heads do -----------------------------------


def token_ids(words) -> np.ndarray:
    """(T,) the ids of `words`; ValueError naming a word not in VOCABULARY."""
    unknown = [w for w in words if w not in VOCABULARY]
    if unknown:
        raise ValueError(
            f"the trained model knows 64 words, not {', '.join(map(repr, unknown))}"
            f"; its words: {' '.join(VOCABULARY)}"
        )
    return np.array([VOCABULARY.index(w) for w in words])


def check_words(model: TrainedModel, words) -> np.ndarray:
    """(T,) the ids of `words`; ValueError if the model cannot read them (a
    word not in VOCABULARY, none, or more than its positions)."""
    if not 1 <= len(words) <= model.config.seq_len:
        raise ValueError(
            f"the trained model reads 1 to {model.config.seq_len} words, "
            f"not {len(words)}"
        )
    return token_ids(words)


def streams(model: TrainedModel, tokens: np.ndarray):
    """What enters each layer, and each layer's weights, for tokens (..., T).

    Returns:
        [x entering layer l (..., T, C)], [weights of layer l (..., H, T, T)],
        and the logits (..., T, V).
    """
    from impl_numpy.attention import multi_head_attention

    T = tokens.shape[-1]
    x = model.params["embed"][tokens] + model.params["pos"][:T]  # (..., T, C)
    inputs, weights = [], []
    for layer in range(model.n_layers):
        inputs.append(x)
        out, w = multi_head_attention(
            x, *model.layer_weights(layer), model.config.n_heads
        )
        x = x + out  # the residual stream
        weights.append(w)
    return inputs, weights, x @ model.params["unembed"]


def fixture(model: TrainedModel, layer: int, words=SENTENCE) -> Fixture:
    """A layer of the trained model as a Fixture: x is what enters that layer
    when the model reads `words`, the weights are the layer's, the tokens
    label it."""
    inputs, _, _ = streams(model, check_words(model, words))
    preset = Preset(
        "trained",
        d_model=model.config.d_model,
        n_heads=model.config.n_heads,
        seed=model.config.seed,
        tokens=tuple(words),
    )
    return Fixture(preset, inputs[layer], *model.layer_weights(layer))


def head_columns(fixture_: Fixture, head: int) -> tuple[np.ndarray, ...]:
    """w_q, w_k, w_v (C, D) of one head: its columns of the layer's weights."""
    D = fixture_.preset.d_head
    columns = slice(head * D, (head + 1) * D)
    return tuple(w[:, columns] for w in (fixture_.w_q, fixture_.w_k, fixture_.w_v))


@dataclass(frozen=True)
class HeadRole:
    """What one head does, measured.

    Attributes:
        layer, head: which head.
        scores: per pattern (PATTERNS), the head's mean weight on that
            pattern's key over the queries that have one.
        chance: per pattern, what a uniform causal row gives one key over the
            same queries.
    """

    layer: int
    head: int
    scores: dict[str, float]
    chance: dict[str, float]

    @property
    def role(self) -> str:
        """The pattern of the largest score, if that score is at least
        ROLE_THRESHOLD and ROLE_OVER_CHANCE times chance; else "mixed"."""
        best = max(self.scores, key=self.scores.get)
        score = self.scores[best]
        clear = (
            score >= ROLE_THRESHOLD and score >= ROLE_OVER_CHANCE * self.chance[best]
        )
        return best if clear else "mixed"

    @property
    def name(self) -> str:
        return f"layer {self.layer} head {self.head}"

    def describe(self) -> str:
        """'previous-token head: 0.46 of its weight on the token before
        (a uniform row: 0.08)'."""
        best = max(self.scores, key=self.scores.get)
        if self.role == "mixed":
            return (
                f"no one pattern: at most {self.scores[best]:.2f} of its weight on "
                f"{PATTERNS[best]} (the {best} key)"
            )
        return (
            f"{self.role} head: {self.scores[best]:.2f} of its weight on "
            f"{PATTERNS[best]} (a uniform row: {self.chance[best]:.2f})"
        )


def pattern_keys(tokens: np.ndarray) -> dict[str, np.ndarray]:
    """Per pattern, (n, T) the key each query would attend, -1 where none.

    tokens (n, T) are induction sequences: each a period of k distinct tokens,
    repeated (shared/train.py)."""
    n, T = tokens.shape
    i = np.broadcast_to(np.arange(T), (n, T))
    k = period_of(tokens)[:, None]  # (n, 1)
    repeated = i >= k  # the queries whose token came before
    return {
        "previous-token": np.where(i >= 1, i - 1, -1),
        "induction": np.where(repeated, i - k + 1, -1),
        "duplicate-token": np.where(repeated, i - k, -1),
        "current-token": np.where(i >= 1, i, -1),
        "first-token": np.where(i >= 1, 0, -1),
    }


def head_scores(weights: np.ndarray, tokens: np.ndarray):
    """Per pattern, each head's mean weight on the pattern's key, and a
    uniform causal row's, over the queries that have one.

    Args:
        weights: (n, H, T, T) one layer's weights on `tokens` (n, T).
    """
    scores, chance = {}, {}
    for pattern, keys in pattern_keys(tokens).items():
        has = keys >= 0  # (n, T)
        rows, queries = np.nonzero(has)
        picked = weights[rows, :, queries, keys[has]]  # (m, H)
        scores[pattern] = picked.mean(axis=0)  # (H,)
        chance[pattern] = float((1.0 / (queries + 1)).mean())
    return scores, chance


@functools.cache
def head_roles(path: Path = WEIGHTS) -> tuple[HeadRole, ...]:
    """What every head of the model at `path` does, measured on the training
    task's held-out sequences (layer by layer, head by head)."""
    model = load(path)
    held_out = make_task(model.config).held_out  # (256, T)
    _, weights, _ = streams(model, held_out)
    roles = []
    for layer, w in enumerate(weights):
        scores, chance = head_scores(w, held_out)
        for h in range(model.config.n_heads):
            roles.append(
                HeadRole(layer, h, {p: float(s[h]) for p, s in scores.items()}, chance)
            )
    return tuple(roles)


def clearest_head(layer: int, path: Path = WEIGHTS) -> int:
    """The head of `layer` whose role is clearest (its largest pattern score)."""
    roles = [r for r in head_roles(path) if r.layer == layer]
    return max(roles, key=lambda r: max(r.scores.values())).head


def layer_record(layer: int, path: Path = WEIGHTS) -> dict:
    """What a command's results.json says of a trained layer it ran: the file,
    the layer, and each head's measured role, its weight on the role's key and
    a uniform row's ("mixed": its largest pattern)."""
    heads = []
    for r in head_roles(path):
        if r.layer == layer:
            best = r.role if r.role != "mixed" else max(r.scores, key=r.scores.get)
            heads.append(
                {
                    "head": r.head,
                    "role": r.role,
                    "pattern": best,
                    "weight": r.scores[best],
                    "uniform": r.chance[best],
                    "text": r.describe(),
                }
            )
    return {"file": SAVED_AS, "layer": layer, "heads": heads}


def roles_text(path: Path = WEIGHTS) -> list[str]:
    """'layer 0 head 2: previous-token head: 0.46 ...', one line a head."""
    return [f"{r.name}: {r.describe()}" for r in head_roles(path)]


# What a command shows ------------------------------------------------------------


@dataclass(frozen=True)
class View:
    """The attention a command shows: a fixture, and the head its single-head
    walk takes.

    Attributes:
        fixture: x and the layer's weights (C, C), labelled with its tokens.
        layer: the trained model's layer shown, or None for random weights.
        head: the head whose columns the single-head lesson takes (trained),
            or None: the whole (C, C) projections as one head of D = C, as the
            random weights' lesson has always been run.
    """

    fixture: Fixture
    layer: int | None
    head: int | None

    @property
    def trained(self) -> bool:
        return self.layer is not None

    @property
    def labels(self) -> list[str]:
        return list(self.fixture.preset.tokens)

    def single_weights(self) -> tuple[np.ndarray, ...]:
        """w_q, w_k, w_v of the single-head lesson: the head's columns, or all."""
        if self.head is None:
            return self.fixture.w_q, self.fixture.w_k, self.fixture.w_v
        return head_columns(self.fixture, self.head)

    def role(self, head: int) -> HeadRole | None:
        """What a head of the shown layer does, measured (None: random weights)."""
        if not self.trained:
            return None
        return next(r for r in head_roles() if (r.layer, r.head) == (self.layer, head))

    def describe(self, multi: bool = False) -> str:
        """'the trained model, layer 1, head 3 (an induction head)', or the
        random weights' preset."""
        p = self.fixture.preset
        if not self.trained:
            heads = (
                f"{p.n_heads} heads, D = {p.d_head}"
                if multi
                else (f"one head, D = {p.d_model}")
            )
            return f"{p.name} preset ({heads}), random weights"
        if multi:
            heads = f"{p.n_heads} heads, D = {p.d_head}"
            return f"the trained model, layer {self.layer} ({heads})"
        role = self.role(self.head).role
        article = "an" if role[0] in "aeiou" else "a"
        what = "no one pattern" if role == "mixed" else f"{article} {role} head"
        where = f"layer {self.layer}, head {self.head}"
        return f"the trained model, {where} ({what}, D = {p.d_head})"


def view(
    weights: str = "trained",
    layer: int | None = None,
    head: int | None = None,
    preset: str = "tiny",
    words=SENTENCE,
) -> View:
    """The View of `weights` ("trained" or "random"); for trained, `layer`
    (DEFAULT_LAYER if None) and `head` (its clearest if None); for random,
    the preset."""
    if weights == "random":
        from shared import PRESETS, make_fixture

        return View(make_fixture(PRESETS[preset]), None, None)
    layer = DEFAULT_LAYER if layer is None else layer
    head = clearest_head(layer) if head is None else head
    return View(fixture(load(), layer, words), layer, head)
