"""What each head of the trained model does, measured, never written down:
on the training task's 256 held-out sequences, the mean weight each head puts
on the key that a previous-token, an induction, a duplicate-token, a
current-token or a first-token head would attend (PATTERNS), against what a
uniform causal row gives that key.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shared.train import make_task, period_of
from triptych.common.trained.model import SAVED_AS, WEIGHTS, load, streams

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


CIRCUIT = ("induction", "previous-token")
"""The roles of the induction circuit (Olsson et al. 2022: a previous-token
head in one layer, an induction head reading it in the next), in the order
`default_head` prefers them."""


def default_head(layer: int, path: Path = WEIGHTS) -> int:
    """The head of `layer` that run, lab and read show as their single head
    when none is asked: its clearest induction head, else its clearest
    previous-token head (CIRCUIT), else its clearest head. Layer 1: an
    induction head (the stripe a period back); layer 0: a previous-token head
    (the stripe under the diagonal), not its current-token head."""
    roles = [r for r in head_roles(path) if r.layer == layer]
    for role in CIRCUIT:
        found = [r for r in roles if r.role == role]
        if found:
            return max(found, key=lambda r: r.scores[role]).head
    return clearest_head(layer, path)


def layer_record(layer: int, path: Path = WEIGHTS) -> dict:
    """What a command's results.json says of a trained layer it ran: the file,
    the layer, the head its single-head attention takes (`default_head`), and
    each head's measured role, its weight on the role's key and a uniform
    row's ("mixed": its largest pattern)."""
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
    single = default_head(layer, path)
    return {"file": SAVED_AS, "layer": layer, "single_head": single, "heads": heads}


def roles_text(path: Path = WEIGHTS) -> list[str]:
    """'layer 0 head 2: previous-token head: 0.46 ...', one line a head."""
    return [f"{r.name}: {r.describe()}" for r in head_roles(path)]
