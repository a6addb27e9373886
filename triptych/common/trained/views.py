"""What a command shows of the trained model (or of random weights): a layer as
a fixture, and the head its single-head walk takes (`view`, for `triptych
lab`, `triptych read` and `triptych run`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shared.fixture import Fixture
from triptych.common.trained.model import SENTENCE, fixture, head_columns, load
from triptych.common.trained.roles import HeadRole, default_head, head_roles

DEFAULT_LAYER = 1
"""The layer the views show by default: the induction heads."""


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
    (DEFAULT_LAYER if None) and `head` (`default_head` if None: the head run,
    lab and read call the single head), reading `words`; for random, the
    preset."""
    if weights == "random":
        from shared import PRESETS, make_fixture

        return View(make_fixture(PRESETS[preset]), None, None)
    layer = DEFAULT_LAYER if layer is None else layer
    head = default_head(layer) if head is None else head
    return View(fixture(load(), layer, words), layer, head)
