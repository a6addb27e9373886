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
# # kernel.py: the online softmax as a kernel, in JAX
#
# Flash attention in JAX: the online softmax of blockwise.py as a Pallas kernel.
#
# blockwise.py runs the online softmax as array operations, each a trip through
# memory. Here it is one program per (batch x head, query block) that keeps its
# query block and the running max m, sum l and accumulator acc on chip while it
# loops over the key blocks up to the diagonal, then writes `out` and each
# row's log-sum-exp. With a sliding window the loop starts at the first key block the
# query block reaches; with grouped-query attention each program reads its KV
# head's rows in place (never repeated in memory). Pallas
# (`jax.experimental.pallas`) writes that program in jax.numpy on refs: a grid, a
# BlockSpec per array for the block each program sees, and the kernel; on a GPU
# it lowers to Triton, on a TPU to Mosaic (never run: no TPU was at hand), and
# `interpret=True` runs it as plain JAX anywhere. impl_torch/kernel.py is the
# same kernel in Triton.
#
# The backward pass is no kernel: a jax.custom_vjp recomputes the weights one
# key block at a time from the saved lse, in jax.numpy (`flash_backward`).
# docs/kernels.md maps every line to blockwise.py.
#
# Shape legend: ... batch, T sequence, C model width, H heads, D head width,
# B block_size, N the batch axes and heads in one, Tp and Dp T and D padded;
# H_kv key/value heads, G = H / H_kv, N_kv the batch axes and KV heads in one.
#
# The first code cell installs the project where it is missing (in Colab). The
# functions are `impl_jax/kernel.py`'s, as the page shows them: edit one and
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
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu, triton as plgpu

from impl_jax.kernel import divide, key_blocks, matmul
from impl_jax.variants import soft_cap
from shared.validation.kernels import tile_size

# %%
def flash_kernel(
    q_ref,
    k_ref,
    v_ref,
    keep_ref,
    out_ref,
    lse_ref,
    *,
    block_size,
    n_blocks,
    causal,
    scale,
    window,
    softcap,
):
    """One program: query block i against the key blocks up to the diagonal
    (causal) or all of them, from the first its window reaches. The refs are
    this program's blocks."""
    B, i = block_size, pl.program_id(1)
    q = q_ref[...]  # (B, Dp), in the input dtype
    stats = jnp.promote_types(q.dtype, jnp.float32)  # at least float32
    # 4. scale by 1 / sqrt(D), once on the queries rather than on every block of scores
    q = (q.astype(stats) * scale).astype(q.dtype)
    rows = i * B + lax.broadcasted_iota(jnp.int32, (B, B), 0)  # each score's query
    row_max = jnp.full((B,), -jnp.inf, stats)  # (B,), m
    row_sum = jnp.zeros((B,), stats)  # (B,), l
    acc = jnp.zeros(q.shape, stats)  # (B, Dp), acc

    # 6. (loop) softmax, online: the key blocks up to the diagonal (causal) or
    #    every one, each through online_softmax_step (3, 5, 6, 7); the loop's
    #    bounds are the program's own i: the blocks above the diagonal, and
    #    those before its window, are never read
    def key_block(j, state):
        keys = pl.ds(pl.multiple_of(j * B, B), B)  # the positions of key block j
        k_block, v_block = k_ref[keys, :], v_ref[keys, :]  # (B, Dp) each
        allowed = (keep_ref[0, keys] != 0)[None, :]  # (1, B): padding never kept
        if causal:  # only the diagonal block has keys after its queries
            columns = j * B + lax.broadcasted_iota(jnp.int32, (B, B), 1)
            allowed = allowed & (columns <= rows)  # (B, B)
        if window is not None:  # (causal) i - W < j: variants.window_mask's rule
            allowed = allowed & (columns > rows - window)  # (B, B)
        return online_softmax_step(state, q, k_block, v_block, allowed, softcap)

    first, stop = key_blocks(i, B, n_blocks, causal, window)
    state = lax.fori_loop(first, stop, key_block, (row_max, row_sum, acc))
    row_max, row_sum, acc = state
    # 6. (end) normalize: out = acc / l, where l = 0 only if nothing was attended
    attended = row_sum > 0  # (B,)
    row_sum = jnp.where(attended, row_sum, 1.0)  # 0 / 1 = 0, never NaN
    out_ref[...] = (acc / row_sum[:, None]).astype(out_ref.dtype)
    lse = jnp.where(attended, row_max + jnp.log(row_sum), -jnp.inf)  # (B,)
    lse_ref[...] = lse[:, None]  # (B, 1)

# %%
def online_softmax_step(state, q_block, k_block, v_block, allowed, softcap):
    """One key block into the running (m, l, acc) of one query block, on chip;
    softcap: None, or soft-capping's c (variants.py)."""
    row_max, row_sum, acc = state
    # 3. scores = q @ k^T, one block
    scores = matmul(q_block, k_block, acc.dtype, transpose_b=True)  # (B, B)
    if softcap is not None:  # on the scaled scores, before the mask
        scores = soft_cap(scores, softcap)  # variants.py
    # 5. mask the future and the keys not kept (padding, and the given mask)
    scores = jnp.where(allowed, scores, -jnp.inf)
    # 6. softmax, online: the new running max, and by how much to rescale what
    #    was summed under the old one (exp(-inf) = 0 on the first block)
    new_max = jnp.maximum(row_max, scores.max(axis=-1))  # (B,)
    shift = jnp.where(new_max == -jnp.inf, 0.0, new_max)  # nothing attended yet
    rescale = jnp.exp(row_max - shift)  # (B,)
    weights = jnp.exp(scores - shift[:, None])  # (B, B), not yet normalized
    row_sum = row_sum * rescale + weights.sum(axis=-1)  # (B,)
    # 7. weighted sum of values, accumulated
    acc = acc * rescale[:, None]  # (B, Dp)
    acc = acc + matmul(weights.astype(v_block.dtype), v_block, acc.dtype)  # (B, Dp)
    return new_max, row_sum, acc

# %%
def flash_forward(q, k, v, keep, settings):
    """Launch the kernel on q (..., T, D), k, v (..., T, D) (with GQA, their
    head axis H_kv) and keep (..., T): one program per (batch x head, query
    block); returns out (..., T, D) and lse (..., T)."""
    block_size, causal, scale_by, interpret, window, softcap = settings
    *batch, T, D = q.shape
    B = min(block_size, tile_size(T))  # no block longer than T needs
    n_blocks = -(-T // B)
    # Pallas tiles whole blocks: pad T to n_blocks * B (keys never kept) and D
    # to a power of two (zeros: q . k and the values' real columns unchanged)
    pad = ((0, 0), (0, n_blocks * B - T), (0, tile_size(D) - D))
    q, k, v = (jnp.pad(a.reshape(-1, T, D), pad) for a in (q, k, v))  # (N, Tp, Dp)
    keep = jnp.pad(keep.reshape(-1, T).astype(jnp.int32), pad[:2])  # (N, Tp)
    keep = keep[:, None, :]  # (N, 1, Tp): a row, for a TPU (below)
    N, Tp, Dp = q.shape
    G = N // k.shape[0]  # the query heads of each KV head: N_kv = N / G
    stats = jnp.promote_types(q.dtype, jnp.float32)  # m, l, acc and lse
    kernel = functools.partial(
        flash_kernel, block_size=B, n_blocks=n_blocks, causal=causal, scale=scale_by,
        window=window, softcap=softcap,
    )  # fmt: skip
    # program (n, i) sees query block i of row n, and all the keys of row
    # n // G, its KV head's (GQA; n itself when G = 1). A TPU takes a block
    # whose last two axes are whole or multiples of (8, 128): hence keep as a
    # (1, Tp) row and lse as a (B, 1) column
    query_block = pl.BlockSpec((None, B, Dp), lambda n, i: (n, i, 0))
    whole_row = pl.BlockSpec((None, Tp, Dp), lambda n, i: (divide(n, G), 0, 0))
    call = functools.partial(
        pl.pallas_call,
        kernel,
        out_shape=(
            jax.ShapeDtypeStruct((N, Tp, Dp), q.dtype),
            jax.ShapeDtypeStruct((N, Tp, 1), stats),
        ),
        grid=(N, n_blocks),
        in_specs=[
            query_block,
            whole_row,
            whole_row,
            pl.BlockSpec((None, 1, Tp), lambda n, i: (n, 0, 0)),
        ],
        out_specs=[query_block, pl.BlockSpec((None, B, 1), lambda n, i: (n, i, 0))],
    )
    if interpret:
        out, lse = call(interpret=True)(q, k, v, keep)
    else:  # each compiler takes its own settings: chosen when lowered
        triton = call(compiler_params=plgpu.CompilerParams(num_warps=4, num_stages=2))
        parallel = pltpu.CompilerParams(dimension_semantics=("parallel", "parallel"))
        mosaic = call(compiler_params=parallel)  # the programs are independent
        out, lse = lax.platform_dependent(q, k, v, keep, tpu=mosaic, default=triton)
    out = out[:, :T, :D].reshape(*batch, T, D)  # (..., T, D)
    return out, lse[:, :T, 0].reshape(*batch, T)

# %% [markdown]
# ## Against the float64 oracle, in float32

# %%
from impl_jax.arrays import from_numpy, to_numpy
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
# traced once, compiled as one program; settings decides shapes: static
jax.clear_caches()  # an edit above is traced anew
launch = jax.jit(flash_forward, static_argnames="settings")
# blocks of 2: the last query block's program loops over three key blocks,
# rescaling what it summed when the max grows; 4 does not divide T = 6: the
# padded keys are never kept
for size in (2, 4):
    settings = (
        size,  # block_size: the rows of a query block, the keys of a key block
        True,  # causal
        1 / math.sqrt(4),  # the scale, 1 / sqrt(D)
        # interpret: Pallas's interpreter, the kernel as plain JAX on any
        # machine (False compiles it: to Triton on a GPU)
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
