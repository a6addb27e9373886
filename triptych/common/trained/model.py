"""The trained model itself: where its weights are, the words its token ids
are given, and its forward.

The file (WEIGHTS, written in FORMAT by `records.save`) holds the parameters
of `triptych train`'s induction model and the record of the run that made
them; `load` reads it. The task knows only token ids; VOCABULARY gives them
words, so that a class reads "cat" rather than 17, and `streams` runs the
model on them layer by layer, so that `fixture` can hand a command what
enters one layer.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import shared
from shared.config import Preset
from shared.fixture import Fixture
from shared.train import LAYER_WEIGHTS, TrainConfig

WEIGHTS = Path(shared.__file__).resolve().parent / "fixtures" / "induction.npz"
"""The shipped weights (a file of the shared package's data)."""

SAVED_AS = "shared/fixtures/induction.npz"
"""WEIGHTS as the repository names it."""

FORMAT = "triptych-weights/1"

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


ZIP_MAGIC = b"PK\x03\x04"
"""The first bytes of every .npz file (a zip archive)."""


@functools.cache
def load(path: Path = WEIGHTS) -> TrainedModel:
    """The weights saved at `path` (the shipped ones by default).

    Raises:
        ValueError: `path` is not an .npz file of FORMAT, said so (never
            numpy's advice to load a file that is not one as a pickle).
    """
    with open(path, "rb") as file:
        if file.read(4) != ZIP_MAGIC:  # a text file, an .npy, a pickle
            raise ValueError(
                "not an .npz file (triptych train --save-weights writes them)"
            )
    with np.load(path, allow_pickle=False) as saved:
        if "meta" not in saved.files:
            raise ValueError(f"an .npz file, but not a {FORMAT} one (no 'meta')")
        meta = json.loads(str(saved["meta"][()]))
        params = {k: saved[k] for k in saved.files if k != "meta"}
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path}: not a {FORMAT} file")
    return TrainedModel(params, TrainConfig(**meta["config"]), meta)


def token_ids(words) -> np.ndarray:
    """(T,) the ids of `words`; ValueError naming a word not in VOCABULARY."""
    unknown = list(dict.fromkeys(w for w in words if w not in VOCABULARY))  # once each
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
