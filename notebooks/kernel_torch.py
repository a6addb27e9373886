# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # kernel.py: the online softmax as a kernel, in PyTorch
#
# Flash attention in PyTorch: the online softmax of blockwise.py as a Triton kernel.
#
# blockwise.py runs the online softmax as array operations, each a trip through
# memory. Here it is one program per (batch x head, query block) that keeps its
# query block and the running max m, sum l and accumulator acc on chip while it
# loops over the key blocks up to the diagonal, then writes `out` and each
# row's log-sum-exp. With a sliding window the loop starts at the first key block the
# query block reaches; with grouped-query attention each program reads its KV
# head's rows in place (never repeated in memory). Triton (`triton.jit`) writes
# that program on pointers: each program finds its rows from its ids, computes
# every address and masks every load past the end by hand. On a GPU it compiles;
# on CPU tensors it runs in Triton's interpreter, which TRITON_INTERPRET=1 turns
# on: Triton reads it as `triton.jit` makes each kernel, this module's when it is
# imported. impl_jax/kernel.py is the same kernel in Pallas.
#
# The backward pass is no kernel: a torch.autograd.Function recomputes the
# weights one key block at a time from the saved lse, in torch (`flash_backward`).
# docs/kernels.md maps every line to blockwise.py. This module needs Triton
# (the `kernels` extra); `import impl_torch` does not import it.
#
# Shape legend: ... batch, T sequence, C model width, H heads, D head width,
# B block_size, N the batch axes and heads in one, Dp D padded; H_kv key/value
# heads, G = H / H_kv, N_kv the batch axes and KV heads in one.
#
# The first code cell installs the project where it is missing (in Colab). The
# functions are `impl_torch/kernel.py`'s, as the page shows them: edit one and
# rerun the cells below it. `flash_forward`, last, is not on the page: it
# launches the kernel above it, the notebook's own.

# %%
# Setup: where the project is not importable (in Colab), install it from
# its repository with pip (Colab's own NumPy, torch and JAX are enough);
# where it is (a clone after `pip install -e .`), nothing happens.
import importlib
import importlib.util
import subprocess
import sys

REPOSITORY = "https://github.com/attention-triptych/attention-triptych"
if importlib.util.find_spec("impl_numpy") is None:
    print(f"installing attention-triptych from {REPOSITORY}")
    package = f"attention-triptych @ git+{REPOSITORY}"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", package], check=True)
    importlib.invalidate_caches()

# %%
# Triton runs CPU tensors only in its interpreter, which
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
os.environ["TRITON_INTERPRET"] = "1"

# %%
import math

import numpy as np
import torch
import triton
import triton.language as tl

from impl_torch.kernel import key_blocks, soft_cap_kernel
from shared.validation.kernels import tile_size

# %%
@triton.jit
def flash_kernel(
    inputs,
    outputs,
    T,
    D,
    scale,
    G,
    CAUSAL: tl.constexpr,
    WINDOW: tl.constexpr,
    SOFTCAP: tl.constexpr,
    BLOCK: tl.constexpr,
    BLOCK_D: tl.constexpr,
    STATS: tl.constexpr,
):
    """One program: query block i of row n against the key blocks up to the
    diagonal (causal) or all of them, from the first its window reaches (WINDOW
    None: none); its KV head's keys, row n // G. Every address and mask by hand.
    inputs: the pointers of q, k, v and keep; outputs: those of out and lse."""
    q_ptr, k_ptr, v_ptr, keep_ptr = inputs
    out_ptr, lse_ptr = outputs
    n, i = tl.program_id(0).to(tl.int64), tl.program_id(1)
    row = n * T * D  # where row n's (T, D) starts in q and out
    kv_row = (n // G) * T * D  # where its KV head's starts in k and v (GQA)
    rows = i * BLOCK + tl.arange(0, BLOCK)  # (B,): the positions of query block i
    dims = tl.arange(0, BLOCK_D)  # (Dp,): D, padded to a power of two
    in_q = (rows[:, None] < T) & (dims[None, :] < D)  # (B, Dp): not past the end
    q = tl.load(q_ptr + row + rows[:, None] * D + dims[None, :], mask=in_q, other=0.0)
    # 4. scale by 1 / sqrt(D), once on the queries rather than on every block of scores
    q = (q.to(STATS) * scale).to(q.dtype)
    row_max = tl.full([BLOCK], -float("inf"), STATS)  # (B,), m
    row_sum = tl.zeros([BLOCK], STATS)  # (B,), l
    acc = tl.zeros([BLOCK, BLOCK_D], STATS)  # (B, Dp), acc
    # 6. (loop) softmax, online: the key blocks up to the diagonal (causal) or
    #    every one, each through online_softmax_step (3, 5, 6, 7); the loop's
    #    bounds are the program's own i: the blocks above the diagonal, and
    #    those before its window, are never read
    first, stop = key_blocks(i, T, BLOCK, CAUSAL, WINDOW)
    for j in range(first, stop):
        keys = j * BLOCK + tl.arange(0, BLOCK)  # (B,): the positions of key block j
        in_kv = (keys[:, None] < T) & (dims[None, :] < D)  # (B, Dp)
        block = kv_row + keys[:, None] * D + dims[None, :]  # (B, Dp) offsets
        k_block = tl.load(k_ptr + block, mask=in_kv, other=0.0)  # (B, Dp)
        v_block = tl.load(v_ptr + block, mask=in_kv, other=0.0)  # (B, Dp)
        keep = tl.load(keep_ptr + n * T + keys, mask=keys < T, other=0)  # (B,)
        allowed = (keep != 0)[None, :]  # (1, B): past the end never kept
        if CAUSAL:  # only the diagonal block has keys after its queries
            allowed = allowed & (keys[None, :] <= rows[:, None])  # (B, B)
        if WINDOW is not None:  # (causal) i - W < j: variants.window_mask's rule
            allowed = allowed & (keys[None, :] > rows[:, None] - WINDOW)  # (B, B)
        row_max, row_sum, acc = online_softmax_step(
            row_max, row_sum, acc, q, k_block, v_block, allowed, SOFTCAP
        )
    # 6. (end) normalize: out = acc / l, where l = 0 only if nothing was attended
    attended = row_sum > 0  # (B,)
    row_sum = tl.where(attended, row_sum, 1.0)  # 0 / 1 = 0, never NaN
    out = (acc / row_sum[:, None]).to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + row + rows[:, None] * D + dims[None, :], out, mask=in_q)
    lse = tl.where(attended, row_max + tl.log(row_sum), -float("inf"))
    tl.store(lse_ptr + n * T + rows, lse, mask=rows < T)

# %%
@triton.jit
def online_softmax_step(
    row_max, row_sum, acc, q_block, k_block, v_block, allowed, SOFTCAP: tl.constexpr
):
    """One key block into the running (m, l, acc) of one query block, on chip;
    SOFTCAP: None, or soft-capping's c (variants.py). "ieee": float32
    multiplies exactly, not in TF32, on a GPU."""
    # 3. scores = q @ k^T, one block
    scores = tl.dot(
        q_block, tl.trans(k_block), out_dtype=acc.dtype, input_precision="ieee"
    )  # (B, Dp) @ (Dp, B) -> (B, B)
    if SOFTCAP is not None:  # on the scaled scores, before the mask
        scores = soft_cap_kernel(scores, SOFTCAP)
    # 5. mask the future and the keys not kept (padding, and the given mask)
    scores = tl.where(allowed, scores, -float("inf"))
    # 6. softmax, online: the new running max, and by how much to rescale what
    #    was summed under the old one (exp(-inf) = 0 on the first block)
    new_max = tl.maximum(row_max, tl.max(scores, 1))  # (B,)
    shift = tl.where(new_max == -float("inf"), 0.0, new_max)  # nothing attended yet
    rescale = tl.exp(row_max - shift)  # (B,)
    weights = tl.exp(scores - shift[:, None])  # (B, B), not yet normalized
    row_sum = row_sum * rescale + tl.sum(weights, 1)  # (B,)
    # 7. weighted sum of values, accumulated
    acc = acc * rescale[:, None]  # (B, Dp)
    acc += tl.dot(
        weights.to(v_block.dtype), v_block, out_dtype=acc.dtype, input_precision="ieee"
    )  # (B, B) @ (B, Dp) -> (B, Dp)
    return new_max, row_sum, acc

# %%
def flash_forward(q, k, v, keep, settings):
    """Launch the kernel on q (..., T, D), k, v (..., T, D) (with GQA, their
    head axis H_kv) and keep (..., T): one program per (batch x head, query
    block); returns out (..., T, D) and lse (..., T)."""
    block_size, causal, scale_by, _, window, softcap = settings
    *batch, T, D = q.shape
    B = min(block_size, tile_size(T))  # no block longer than T needs
    n_blocks = triton.cdiv(T, B)
    # Triton reads memory through pointers: one contiguous (T, D) row per n
    q, k, v = (a.reshape(-1, T, D).contiguous() for a in (q, k, v))  # (N, T, D)
    keep = keep.reshape(-1, T).to(torch.int32).contiguous()  # (N, T)
    N = q.shape[0]
    G = N // k.shape[0]  # the query heads of each KV head: k, v (N_kv, T, D)
    stats = torch.promote_types(q.dtype, torch.float32)  # m, l, acc and lse
    out = torch.empty_like(q)  # (N, T, D)
    lse = torch.empty((N, T), dtype=stats, device=q.device)  # (N, T)
    flash_kernel[(N, n_blocks)](
        (q, k, v, keep),
        (out, lse),
        T,
        D,
        scale_by,
        G,
        CAUSAL=causal,
        WINDOW=window,
        SOFTCAP=softcap,
        BLOCK=B,
        BLOCK_D=tile_size(D),
        STATS=tl.float64 if stats == torch.float64 else tl.float32,
        num_warps=4,
        num_stages=2,
    )
    return out.reshape(*batch, T, D), lse.reshape(*batch, T)

# %% [markdown]
# ## Against the float64 oracle, in float32

# %%
from impl_torch.arrays import from_numpy, to_numpy
from shared.reference import reference_single_head
from shared.tolerances import tolerance


def f32(a):  # a NumPy array as the framework's float32 array
    return from_numpy(np.asarray(a), "float32")


def f64(a):  # back to NumPy, in float64
    return np.asarray(to_numpy(a), np.float64)


ATOL, RTOL = tolerance("float32")  # float32's tolerance (docs/suite.md)
rng = np.random.default_rng(0)
x = rng.standard_normal((2, 6, 8))  # (B, T, C)
w = [rng.standard_normal((8, 8)) / math.sqrt(8) for _ in range(4)]  # (C, C)
one = [a[:, :4] for a in w[:3]]  # w_q, w_k, w_v of one head of width D = 4

# %%
# B in the shapes below is the batch of two sequences, not block_size
q, k, v = (f32(x @ a) for a in one)  # one head's (B, T, D), float32
keep = from_numpy(np.ones((2, 6), dtype=bool))  # (B, T): every key kept
expected, _ = reference_single_head(x, *one)
# run as written, one operation at a time
launch = flash_forward
# blocks of 2: the last query block's program loops over three key blocks,
# rescaling what it summed when the max grows; 4 does not divide T = 6: the
# padded keys are never kept
for size in (2, 4):
    settings = (
        size,  # block_size: the rows of a query block, the keys of a key block
        True,  # causal
        1 / math.sqrt(4),  # the scale, 1 / sqrt(D)
        # interpret: for flash_attention, which checks that Triton's
        # interpreter made the kernels (the cell before the imports);
        # flash_forward ignores it
        True,
        None,  # window: none
        None,  # softcap: none
    )
    out, _ = launch(q, k, v, keep, settings)
    distance = np.abs(f64(out) - expected).max()
    print(f"blocks of {size}: max |out - oracle| = {distance:.2e}")
    assert np.allclose(f64(out), expected, atol=ATOL, rtol=RTOL)

# %% [markdown]
# Try it: in `online_softmax_step` leave `acc` unscaled when the max grows (write
# `acc = acc` for `acc = acc * rescale[:, None]`), rerun: blocks of 2 miss the
# oracle. The kernel is the blockwise chapter's online softmax, one program per
# (batch x head, query block), its m, l and acc kept on chip; `flash_forward`
# launches it. docs/kernels.md maps each line to blockwise.py, and runs it
# compiled on a GPU.
