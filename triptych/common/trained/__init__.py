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

    model.py    the file and its loading, the words of the token ids, the
                model's forward, a layer as a Fixture
    records.py  a run's record saved with the weights, and a fresh run
                compared with it (--save-weights, --check-weights)
    roles.py    what each head does, measured (`head_roles`)
    views.py    what a command shows (`view`): a layer, and the head its
                single-head walk takes

Every name is imported from here (`trained.load()`, `trained.view(...)`).
"""

from __future__ import annotations

from triptych.common.trained.model import (
    FORMAT,
    SAVED_AS,
    SENTENCE,
    VOCABULARY,
    WEIGHTS,
    TrainedModel,
    check_words,
    fixture,
    head_columns,
    load,
    streams,
    token_ids,
)
from triptych.common.trained.records import (
    CHECK_COMMAND,
    RECORDED_STEPS,
    SAMPLES,
    SAVE_COMMAND,
    Comparison,
    Record,
    compare,
    digest,
    samples,
    save,
    settings_differ,
)
from triptych.common.trained.roles import (
    CIRCUIT,
    PATTERNS,
    ROLE_OVER_CHANCE,
    ROLE_THRESHOLD,
    HeadRole,
    clearest_head,
    default_head,
    head_roles,
    head_scores,
    layer_record,
    pattern_keys,
    roles_text,
)
from triptych.common.trained.views import DEFAULT_LAYER, View, view

__all__ = [
    "CHECK_COMMAND",
    "CIRCUIT",
    "DEFAULT_LAYER",
    "FORMAT",
    "PATTERNS",
    "RECORDED_STEPS",
    "ROLE_OVER_CHANCE",
    "ROLE_THRESHOLD",
    "SAMPLES",
    "SAVED_AS",
    "SAVE_COMMAND",
    "SENTENCE",
    "VOCABULARY",
    "WEIGHTS",
    "Comparison",
    "HeadRole",
    "Record",
    "TrainedModel",
    "View",
    "check_words",
    "clearest_head",
    "compare",
    "default_head",
    "digest",
    "fixture",
    "head_columns",
    "head_roles",
    "head_scores",
    "layer_record",
    "load",
    "pattern_keys",
    "roles_text",
    "samples",
    "save",
    "settings_differ",
    "streams",
    "token_ids",
    "view",
]
