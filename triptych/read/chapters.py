"""The page's chapters: each parallel file the page shows, the functions (or
classes) of it shown, in order, and how its step comments are written.

CHAPTERS follows the reading order (triptych.common.reading.ORDER, the one
README.md and docs/reading.md give; tests/test_read.py checks that they
agree). To add a chapter: a Chapter here at its place in the order, its
words in text.CHAPTER_TEXT, and its file in ORDER and both lists.

`rows` cuts each chapter's files into rows and aligns them, `tokens` marks
each line's tokens where they differ from NumPy's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

STEP = r"^\s*# (?P<mark>(?P<number>[1-7])\.) (?P<words>.*)$"
"""A step comment of the seven steps: `# 3. scores = q @ k^T`."""
SHARDED_STEP = r"^\s*# (?P<mark>(?:ring |heads )?(?P<number>[1-7])\.) (?P<words>.*)$"
"""sharded.py's comments: the seven steps' and the stages of the ring and of
the heads across devices (`# ring 2. ...`, shared.steps.RING_STAGES)."""
TRAINING_STEP = r"^\s*# (?P<mark>\[(?P<number>[1-4])\]) (?P<words>.*)$"
"""train.py's comments: `# [1] forward: ...` to `# [4] Adam: ...`."""


@dataclass(frozen=True)
class Chapter:
    """One parallel file: its slug, title, file name, and the functions (or
    classes) shown, in order.

    A chapter may also set `files`, (backend, file) for a backend that reads
    another file (NumPy has no kernel.py: its blockwise.py stands there);
    `aliases`, (name, the name whose rows it shares) for a function that
    another backend calls otherwise; `own_heads`, functions so aliased whose
    head keeps a row of its own (a wrapper and the function it runs on every
    device); `by_step`, to align the pieces by step number (and its
    "(end)"-like tag) where the comments' words differ; `steps`, the pattern
    of its step comments; and `absent`, what a cell says where a backend has
    no such lines.
    """

    slug: str
    title: str
    file: str
    names: tuple[str, ...]
    files: tuple[tuple[str, str], ...] = ()
    aliases: tuple[tuple[str, str], ...] = ()
    own_heads: tuple[str, ...] = ()
    by_step: bool = False
    steps: str = STEP
    absent: str = "No such lines here: autodiff does this."

    def file_of(self, backend: str) -> str:
        """The file this chapter reads in `backend`."""
        return dict(self.files).get(backend, self.file)

    def step_comment(self, line: str):
        """The match of a step comment of this chapter's files, or None."""
        return re.match(self.steps, line)


CHAPTERS = (
    Chapter(
        "lesson",
        "The lesson: the seven steps",
        "lesson.py",
        ("single_head_attention", "multi_head_attention"),
    ),
    Chapter(
        "attention",
        "attention.py: the library's attention",
        "attention.py",
        (
            "single_head_attention",
            "multi_head_attention",
            "multi_head",
            "attend",
            "attend_heads",
            "allowed_keys",
            "softmax_or_zeros",
            "finite_values",
            "nan_where_nonfinite_attended",
            "project",
            "at_least_float32",
        ),
    ),
    Chapter(
        "backward",
        "backward.py: by hand and by autodiff",
        "backward.py",
        (
            "single_head_attention_backward",
            "multi_head_attention_backward",
            "attend_backward",
            "project_backward",
        ),
    ),
    Chapter(
        "blockwise",
        "blockwise.py: the online softmax",
        "blockwise.py",
        ("blockwise_attention", "online_softmax_step", "key_block", "unmasked_blocks"),
        absent="No such function here: the loop over the key blocks before the "
        "diagonal is written inline, in Python (JAX jits it on its own, so that "
        "an eager call compiles it once).",
    ),
    Chapter(
        "kv_cache",
        "kv_cache.py: decoding with a cache",
        "kv_cache.py",
        ("init_kv_cache", "decode_step"),
    ),
    Chapter(
        "variants",
        "variants.py: GQA, rotary positions, windows, caps, sinks",
        "variants.py",
        (
            "repeat_kv",
            "normed_and_rotated",
            "rms_norm",
            "rotate",
            "window_mask",
            "variant_scores",
            "make_score_mod",
            "soft_cap",
            "alibi_bias",
            "softmax_with_sinks",
            "sink_state",
            "first_key_block",
            "nonfinite_in_window",
            "cache_slot",
            "slot_positions",
        ),
    ),
    Chapter(
        "module",
        "module.py: the module forms",
        "module.py",
        ("CausalSelfAttention",),
        aliases=(("forward", "__call__"),),  # torch calls forward through __call__
    ),
    Chapter(
        "sharded",
        "sharded.py: attention across devices",
        "sharded.py",
        (
            "shard_sequence",
            "ring_attention",
            "ring_on_device",
            "ring_step",
            "attend_block",
            "pass_on",
            "head_parallel_attention",
        ),
        aliases=(("ring_on_device", "ring_attention"),),
        own_heads=("ring_on_device",),
        steps=SHARDED_STEP,
        absent="No such lines here: this framework does it otherwise (see the "
        "other columns' comments).",
    ),
    Chapter(
        "train",
        "train.py: one training step",
        "train.py",
        (
            "forward",
            "cross_entropy",
            "loss",
            "train_step",
            "gradients",
            "make_optimizer",
            "adam_step",
            "compile_train_step",
        ),
        steps=TRAINING_STEP,
        absent="No such lines here: autodiff, the optimizer's library or the "
        "compiler does this, or (NumPy) there is nothing to compile.",
    ),
    Chapter(
        "train_flax",
        "train_flax.py: the training step in flax",
        "train.py",
        (
            "AttentionOnlyLM",
            "forward",
            "loss",
            "train_step",
            "make_optimizer",
            "compile_train_step",
        ),
        files=(("jax", "train_flax.py"),),
        aliases=(("__call__", "forward"),),
        steps=TRAINING_STEP,
        absent="No such lines in flax: the nnx.Module and nnx.Optimizer hold this.",
    ),
    Chapter(
        "kernel",
        "kernel.py: the online softmax as a kernel",
        "kernel.py",
        ("blockwise_attention", "flash_kernel", "online_softmax_step"),
        files=(("numpy", "blockwise.py"),),
        aliases=(("flash_kernel", "blockwise_attention"),),
        by_step=True,
        absent="No such lines in the kernel: flash_attention, around it, does this.",
    ),
)

BUILDUP = Chapter(
    "buildup",
    "The build-up: from the average of the past to one head",
    "buildup.py",
    (
        "average_loop",
        "average_matmul",
        "average_softmax",
        "dot_product",
        "scaled",
        "one_head",
        "reversed_past",
        "softmax",
    ),
    absent="No such stage here.",
)
"""Chapter 0, before the lesson: impl_*/buildup.py, stage by stage."""
FUSED = Chapter(
    "fused",
    "The framework's own lines",
    "extras.py",
    ("fused",),
    absent="None exists: this framework has no fused attention (NumPy has "
    "none), no function that runs steps 3 to 7 in one call; the seven steps "
    "above are its own way.",
)
"""The lesson chapter's last row: each framework's fused attention."""
FRAMEWORKS = Chapter(
    "frameworks",
    "What each framework adds",
    "extras.py",
    (
        "heads_of",
        "every_head",
        "gradient",
        "trace",
        "compiled",
        "compiled_heads",
        "as_layer",
        "call_layer",
    ),
    absent="Nothing of the kind in this framework (the chapter's words say why).",
)
"""After the lesson: impl_*/extras.py, what a framework brings beyond NumPy."""
PAGE = (BUILDUP, CHAPTERS[0], FRAMEWORKS, *CHAPTERS[1:])
"""The page's chapters: the reading order's files, with chapter 0 before the
lesson and what each framework adds after it (docs/teaching.md, "One
lecture of two hours")."""
