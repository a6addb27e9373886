"""The notebooks notebooks/build.py makes: one per chapter of the page and
framework, in the page's reading order (triptych/read/chapters.py).

Each chapter notebook holds the chapter's functions as the page shows them
(read from impl_<framework>/<file>.py), then a seeded problem and its run
cell (notebooks/run_cells.py): the chapter's function run on it in float32,
and its distance to the float64 oracle of shared/. A run cell may define the
function it runs, calling the chapter's functions shown above it as the
library calls them (buildup, variants, module): tests/test_notebooks.py's
LIBRARY names the library's function that its lines are held to.

To add a chapter (one of triptych/read/chapters.py's PAGE): its run cell in
run_cells.py, its slug in RUNS and its CLOSING words here, its expected lines
in tests/test_notebooks.py, then
`python notebooks/build.py`; the test runs every notebook and compares what
it prints with the library's distance on the same problem.
"""

from __future__ import annotations

from run_cells import (  # notebooks/run_cells.py: the run cells
    ATTENTION,
    BACKWARD,
    BLOCKWISE,
    BUILDUP,
    FRAMEWORKS,
    KERNEL_JAX,
    KERNEL_TORCH,
    KV_CACHE,
    MODULE,
    SHARDED,
    SHARDED_JAX,
    SHARDED_TORCH,
    TRAIN,
    TRAIN_FLAX,
    VARIANTS,
)

RUNS = {  # chapter slug: the cell that runs it, the function it calls, its
    # arguments that decide shapes (static where a framework traces: jax.jit)
    "buildup": (BUILDUP, "every_stage", ()),
    "frameworks": (FRAMEWORKS, "every_head", ("n_heads",)),
    "attention": (ATTENTION, "multi_head_attention", ("n_heads",)),
    "backward": (BACKWARD, "single_head_attention_backward", ()),
    "blockwise": (BLOCKWISE, "blockwise_attention", ("block_size",)),
    "kv_cache": (KV_CACHE, "decode_step", ("n_heads",)),
    "variants": (VARIANTS, "attention_with_variant", ("n_heads",)),
    "module": (MODULE, "forward", ()),
    "sharded": (SHARDED, "ring_attention", ("n_heads",)),
    "train": (TRAIN, "gradients", ("n_heads",)),
    "train_flax": (TRAIN_FLAX, "loss", ()),
    "kernel": (KERNEL_JAX, "flash_forward", ("settings",)),
}
"""The chapters with a notebook, besides the lesson (which needs nothing of
the project: notebooks/build.py writes its oracle out in plain loops). A
framework whose compiler traces (shared/registry.py: JAX's jax.jit) runs the
function through it, as its users do: once traced, one program compiled,
rather than each operation compiled on its first use."""
OWN_RUNS = {  # (chapter, framework): its run cell, where the frameworks' differ
    ("sharded", "torch"): (SHARDED_TORCH, "ring_attention", ()),
    ("sharded", "jax"): (SHARDED_JAX, "ring_attention", ("n_heads", "mesh")),
    ("kernel", "torch"): (KERNEL_TORCH, "flash_forward", ()),
}
"""The run cells of one framework: the ring's devices are a list in NumPy,
processes in a process group in torch (forked by the run cell, each running
the cells above as last run), a mesh of devices in JAX (one global array, one
program);
the kernel runs in Triton's interpreter in torch, in Pallas's in JAX."""
DEVICES = """# JAX fixes its devices when it starts, on its first use: three CPU devices
# for the ring (CPU even where a GPU is), set here, before the imports. A
# Jupyter kernel whose JAX has started with other devices must be restarted.
import jax

try:
    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", 3)
except RuntimeError as started:  # JAX's "should be updated before ..."
    raise RuntimeError(
        "JAX has started in this kernel already, with other devices: restart "
        "the kernel and run from the top"
    ) from started"""

INTERPRETER = """# Triton runs CPU tensors only in its interpreter, which
# TRITON_INTERPRET=1 turns on; Triton reads it as @triton.jit makes each
# kernel, impl_torch.kernel's when it is imported, so it is set here, before
# the imports (without this cell, on a GPU, with CUDA tensors, the kernels
# compile instead: docs/kernels.md). A Jupyter kernel that has imported
# Triton without it must be restarted.
import os
import sys

if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
    raise RuntimeError(
        "Triton was imported in this kernel without its interpreter: restart "
        "the kernel and run from the top"
    )
os.environ["TRITON_INTERPRET"] = "1\""""

BEFORE_IMPORTS = {("sharded", "jax"): DEVICES, ("kernel", "torch"): INTERPRETER}
"""A cell before the imports, as written (no template), for what a framework
fixes early: JAX its devices, when it starts; Triton its interpreter, as it
makes each kernel, the library's when impl_torch.kernel is imported."""
ONLY = {"kernel": ("jax", "torch"), "train_flax": ("jax",)}
"""The chapters with a notebook in some frameworks only: the kernel (NumPy
has none; JAX's, first, runs in Pallas's interpreter on any machine, torch's
in Triton's, where Triton is installed: Colab's torch brings it, the torch
env does not, tests/test_torch_kernel_notebook.py runs it); flax's training
step (the page's NumPy and PyTorch columns show train.py, whose notebooks are
the train chapter's)."""
SHOWN_TOO = {
    "kernel": (
        ("flash_forward",),
        "`flash_forward`, last, is not on the page: it launches the kernel above "
        "it, the notebook's own.",
    )
}
"""The functions a notebook shows besides the page's, and its words on them:
the kernel's launcher, so that the kernel it launches, and the step that
calls, are the notebook's own (edit one, rerun, and the launch runs the edit)."""

CLOSING = {
    "buildup": "Try it: in `scaled` leave the scores undivided by sqrt(D), "
    "rerun: stage 5 is stage 4 again, misses the oracle of a head, which "
    "scales, and its assert stops the run there (stage 6, the lesson's head, "
    "has its own scale and would not move). Stages 1 to 3 are held "
    "to the oracle with every score 0 (w_q = w_k = 0): the average of the past.",
    "frameworks": "Try it: in `heads_of` reshape to (H, C, D) at once, "
    "without the swap, rerun: a head gets a slab of rows of the (C, C) "
    "weight, not its own columns, and every head misses the oracle. The "
    "functions of one framework only (`trace`, `compiled`, `as_layer`) are "
    'the page\'s: docs/reading.md, "What each framework adds".',
    "attention": "Try it: in `softmax_or_zeros` divide by `row_sum` as it is "
    "(drop the `where`), rerun: the rows with nothing to attend become "
    "0 / 0 = NaN, and NaN is near nothing, the oracle's zeros least of all. "
    "docs/contract.md says what each helper promises.",
    "backward": "Try it (NumPy): in `attend_backward` drop the softmax's "
    "second term, the row sum, rerun, and the distance grows. In torch and JAX "
    "the backward is autodiff's, the tape's or the trace's, with no line of "
    "its own to break: set it beside NumPy's by hand. Exercise 5 "
    "(exercises/README.md) asks for the backward by hand.",
    "blockwise": "Try it: in `online_softmax_step` leave `acc` unscaled when "
    "the max grows (drop the `rescale`), rerun, and blocks of 2 miss the "
    "oracle. "
    "Exercise 4 (exercises/README.md) asks for this step.",
    "variants": "Try it: in `window_mask` write `>=` for `>`, rerun: each "
    "query reaches W + 1 keys, one more than the oracle's W. Sinks and "
    "QK-norm, and the functions for blockwise attention and the rolling "
    "cache, are run by the library's attention, blockwise.py and kv_cache.py; "
    "docs/variants.md says what each variant is.",
    "module": "Try it: in `projections` swap the first two, the keys' "
    "weights where the queries' belong, rerun: each score becomes k_i . q_j, "
    "not q_i . k_j, and the distance grows. The module computes nothing of "
    "its own: its call is attention.py's multi_head_attention on the weights "
    "it holds (docs/contract.md, Module forms).",
    "kv_cache": "Try it: attend every slot, not only the filled ones (the "
    "`filled` mask), rerun: the early tokens see empty slots. Exercise 6 "
    "(exercises/README.md) asks for one step.",
    "kernel": "Try it: in `online_softmax_step` leave `acc` unscaled when the "
    "max grows (write `acc = acc` for `acc = acc * rescale[:, None]`), rerun: "
    "blocks of 2 miss the oracle. The kernel is the blockwise chapter's online "
    "softmax, one program per (batch x head, query block), its m, l and acc "
    "kept on chip; `flash_forward` launches it. docs/kernels.md maps each "
    "line to blockwise.py, and runs it compiled on a GPU.",
    "sharded": "Try it: in `ring_step` write `step < rank` for `step <= "
    "rank`, rerun: at step r device r holds device 0's block, chunks 0 and "
    "2N - 1, and now attends it as if both came after its first chunk: its "
    "first chunk misses the keys of chunk 0, its second attends those of "
    "chunk 2N - 1, in its future, and the distance grows.",
    "train": "Try it: in `cross_entropy` write `tokens[:, :-1]` for "
    "`tokens[:, 1:]`, so that each position is asked for itself, not the "
    "next token; rerun: the loss leaves float64's. In torch and JAX the "
    "gradients follow it, for autodiff differentiates the loss as written; in "
    "NumPy they stay float64's, for `gradients` writes the backward by hand and "
    "never calls `cross_entropy`: a hand-written backward must be kept in step "
    "with the forward by hand. This notebook checks the gradients, where the "
    "frameworks differ most; `train_step` and Adam, shown above, are what "
    "`triptych train` runs, step for step alike in the three.",
    "train_flax": "Try it: in `__call__` write `x = out` for `x = x + out`, "
    "rerun: without the residual stream each layer sees only the one before "
    "it, the embeddings reach the unembedding only through the attention, "
    "and neither the loss nor the gradients are NumPy's any more.",
}

NOTEBOOK_WORDS = {
    "see the other columns' comments": "their files say how, in comments",
    "the chapter's words say why": "the page that `triptych read` writes says "
    "why, in this chapter",
}
"""The words of a chapter's `absent` (triptych/read/chapters.py) that point at
the page's columns, as a notebook, which has one framework, says them."""
