"""Flash attention in JAX: the online softmax of blockwise.py as a Pallas kernel.

blockwise.py runs the online softmax as array operations, each a trip through
memory. Here it is one program per (batch x head, query block) that keeps its
query block and the running max m, sum l and accumulator acc on chip while it
loops over the key blocks up to the diagonal, then writes `out` and each
row's log-sum-exp. With a sliding window the loop starts at the first key block the
query block reaches; with grouped-query attention each program reads its KV
head's rows in place (never repeated in memory). Pallas
(`jax.experimental.pallas`) writes that program in jax.numpy on refs: a grid, a
BlockSpec per array for the block each program sees, and the kernel; on a GPU
it lowers to Triton, on a TPU to Mosaic (never run: no TPU was at hand), and
`interpret=True` runs it as plain JAX anywhere. impl_torch/kernel.py is the
same kernel in Triton.

The backward pass is no kernel: a jax.custom_vjp recomputes the weights one
key block at a time from the saved lse, in jax.numpy (`flash_backward`).
docs/kernels.md maps every line to blockwise.py.

Shape legend: ... batch, T sequence, C model width, H heads, D head width,
B block_size, N the batch axes and heads in one, Tp and Dp T and D padded;
H_kv key/value heads, G = H / H_kv, N_kv the batch axes and KV heads in one.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import triton as plgpu

from impl_jax.arrays import FRAMEWORK, require_x64_for
from impl_jax.attention import at_least_float32, finite_values, multi_head
from impl_jax.variants import nonfinite_in_window, repeat_kv, soft_cap
from shared.dtypes import dtype_name
from shared.validation.kernels import (
    check_compiled_tile,
    check_flash,
    check_interpret,
    check_multi_head_flash,
    tile_size,
)

# Not tuned (no GPU was at hand): FlashAttention's own kernels use 64 to 128.
DEFAULT_BLOCK_SIZE = 64
FLASH_DEFAULTS = dict(
    block_size=DEFAULT_BLOCK_SIZE, causal=True, scale=True, interpret=None
)
"""flash_attention's settings, as its multi-head form passes them on."""


def flash_attention(
    q, k, v, mask=None, *, block_size=DEFAULT_BLOCK_SIZE, causal=True, scale=True,
    interpret=None, variant=None,
):  # fmt: skip
    """Attention of per-head q, k, v (..., T, D) by the Pallas kernel.

    Args:
        q, k, v: (..., T, D), one shape and one float dtype, D <= 256.
        mask: None, or a bool key mask broadcastable to (..., 1, T), True = may
            attend (as key_padding_mask makes).
        block_size: B, a power of two: the positions of a query or key block.
        causal, scale: as for blockwise_attention.
        interpret: Pallas's interpreter (True), the compiled kernel (False), or
            compiled on a GPU host and interpreted elsewhere (None). Under jit
            or jax.export, False compiles for the platform lowered for: Triton
            for a GPU, Mosaic for a TPU (docs/kernels.md).
        variant: None, or a shared.Variant of n_kv_heads (q (..., H, T, D), k
            and v (..., H_kv, T, D), query head h reading KV head h // (H /
            H_kv): GQA), the window and softcap (docs/variants.md); a window
            skips the key blocks no row of a query block reaches.

    Returns:
        out (..., T, D) in q's dtype; lse (..., T) in at least float32, -inf
        in a row with nothing to attend (whose out is 0).
    """
    dims, variant = check_flash(
        q, k, v, mask, block_size, causal=causal, variant=variant, framework=FRAMEWORK
    )
    n_kv_heads, window, softcap = (
        (None, None, None)
        if variant is None
        else (variant.n_kv_heads, variant.window, variant.softcap)
    )
    require_x64_for(q.dtype)  # JAX only: float64 needs x64 (docs/contract.md)
    interpret = choose_interpret(interpret, q)
    if not interpret:
        check_compiled_tile(block_size, dims.D, dtype_name(q))
    if mask is None:
        keep = jnp.ones((*dims.batch, dims.T), dtype=bool)  # (..., T)
    else:
        keep = jnp.broadcast_to(mask, (*dims.batch, 1, dims.T))[..., 0, :]  # (..., T)
    # 7. (ahead) NaN in, NaN out, as in attention.py: the rows that attend a
    #    key whose value is not finite are set to NaN at the end
    finite = jnp.isfinite(v).all(axis=-1)  # (..., T): keys with a finite value
    if n_kv_heads is not None:  # each query head's keys: its KV head's (GQA)
        G = q.shape[-3] // n_kv_heads
        finite = repeat_kv(finite[..., None], G)[..., 0]  # (..., H, T)
    nonfinite_so_far = jnp.cumsum(~finite & keep, axis=-1) > 0  # (..., T)
    attends_nonfinite = nonfinite_so_far if causal else nonfinite_so_far[..., -1:]
    if window is not None:  # only a key within the row's window: variants.py
        attends_nonfinite = nonfinite_in_window(finite | ~keep, window)  # (..., T)
    scale_by = 1.0 / math.sqrt(dims.D) if scale else 1.0
    settings = (block_size, causal, scale_by, interpret, window, softcap)
    out, lse = flash_attention_core(q, k, finite_values(v), keep, settings)
    out = jnp.where(attends_nonfinite[..., None], jnp.nan, out)  # NaN in, NaN out
    return out, lse


def multi_head_flash_attention(
    x, w_q, w_k, w_v, w_o, n_heads, mask=None, *, biases=None, variant=None,
    **settings,
):  # fmt: skip
    """Multi-head self-attention with the kernel as its core (docs/kernels.md):
    attention.multi_head around `flash_attention`.

    Args:
        x, w_q, w_k, w_v, w_o, n_heads, biases, variant: as for
            `multi_head_attention` (docs/variants.md), without ALiBi or sinks.
        mask: None, or a bool key mask broadcastable to (..., H, 1, T).
        settings: flash_attention's block_size, causal, scale and interpret.

    Returns:
        out (..., T, C) in x's dtype, and lse (..., H, T).
    """
    settings = FLASH_DEFAULTS | settings
    dims, variant = check_multi_head_flash(
        x, w_q, w_k, w_v, w_o, n_heads, mask, settings, biases=biases,
        variant=variant, framework=FRAMEWORK,
    )  # fmt: skip
    grouped = None if variant is None else variant.for_core(grouped=True)

    def core(q, k, v):  # steps 3 to 7, in the kernel
        return flash_attention(q, k, v, mask, **settings, variant=grouped)

    return multi_head(x, (w_q, w_k, w_v, w_o), dims, core, biases, variant)


def choose_interpret(interpret, q):
    """`interpret`, checked, with None decided by the host's default backend.
    An explicit False under a trace (jit, jax.export) is not checked against
    the host: traced arrays have no device yet, the platform is the one the
    program is lowered for, and Pallas itself refuses to compile for a CPU."""
    if interpret is False and isinstance(q, jax.core.Tracer):
        return False
    platform = jax.default_backend()
    return check_interpret(
        interpret, on_gpu=platform == "gpu", where=platform, language="Pallas"
    )


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


def key_blocks(i, block_size, n_blocks, causal, window):
    """The key blocks [first, stop) query block i visits: up to the diagonal
    (causal) or all n_blocks; from block 0, or with a window of W keys from
    the block of key i * B - W + 1, the first its first row reaches."""
    stop = i + 1 if causal else n_blocks
    if window is None:
        return 0, stop
    return divide(jnp.maximum(i * block_size - window + 1, 0), block_size), stop


def divide(a, b):
    """a // b for an integer a >= 0, in a's dtype: lax.div, for jnp's // takes
    a remainder that Mosaic lowers only on a TPU itself (docs/kernels.md)."""
    a = jnp.asarray(a)
    return lax.div(a, jnp.asarray(b, a.dtype))


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


def matmul(a, b, dtype, transpose_b=False):
    """a @ b (a @ b^T with transpose_b) in the inputs' dtype, summed in
    `dtype`; HIGHEST: float32 multiplies exactly, not in TF32, on a GPU."""
    contract = (((1,), (1 if transpose_b else 0,)), ((), ()))
    return lax.dot_general(
        a, b, contract, precision=lax.Precision.HIGHEST, preferred_element_type=dtype
    )


def flash_backward(q, k, v, keep, out, lse, d_out, d_lse, settings):
    """The gradients of (out, lse) for q, k, v: FlashAttention-2's backward in
    jax.numpy, one key block at a time, the weights exp(score - lse) recomputed
    from the saved lse; memory O(T * B), never (T, T). With GQA, k and v
    (..., H_kv, T, D) are repeated here, and their gradients summed back."""
    block_size, causal, scale_by, _, window, softcap = settings
    dtype, T, kv_shape = q.dtype, q.shape[-2], k.shape
    G = 1 if k.shape == q.shape else q.shape[-3] // k.shape[-3]
    k, v = (repeat_kv(a, G) if G > 1 else a for a in (k, v))  # (..., H, T, D)
    q, k, v, out, d_out = (at_least_float32(a) for a in (q, k, v, out, d_out))
    q = q * scale_by  # the queries the scores were made of
    lse = jnp.where(lse == -jnp.inf, 0.0, lse)[..., None]  # (..., T, 1)
    # (..., T, 1): d_out . out, what softmax's backward subtracts, less lse's share
    delta = (d_out * out).sum(axis=-1, keepdims=True) - d_lse[..., None]
    d_q, d_k, d_v = jnp.zeros_like(q), [], []
    positions = jnp.arange(T)
    for start in range(0, T, block_size):  # key block: a strip of every query
        keys = slice(start, min(start + block_size, T))
        first = start if causal else 0  # the first query that may attend it
        q_rows, d_out_rows = q[..., first:, :], d_out[..., first:, :]  # (..., Tq, D)
        allowed = keep[..., None, keys]  # (..., 1, Bk)
        if causal:
            allowed = allowed & (positions[keys] <= positions[first:, None])
        if window is not None:
            allowed = allowed & (positions[keys] > positions[first:, None] - window)
        scores = q_rows @ k[..., keys, :].mT  # (..., Tq, D) @ (..., D, Bk)
        if softcap is not None:  # c tanh(s / c), whose slope is 1 - tanh^2
            scores = soft_cap(scores, softcap)  # (..., Tq, Bk)
            slope = 1 - (scores / softcap) ** 2  # (..., Tq, Bk)
        scores = jnp.where(allowed, scores, -jnp.inf)  # (..., Tq, Bk)
        weights = jnp.exp(scores - lse[..., first:, :])  # (..., Tq, Bk)
        d_v.append(weights.mT @ d_out_rows)  # (..., Bk, Tq) @ (..., Tq, D)
        d_weights = d_out_rows @ v[..., keys, :].mT  # (..., Tq, Bk)
        d_scores = weights * (d_weights - delta[..., first:, :])  # (..., Tq, Bk)
        if softcap is not None:
            d_scores = d_scores * slope  # (..., Tq, Bk)
        d_k.append(d_scores.mT @ q_rows)  # (..., Bk, Tq) @ (..., Tq, D)
        d_q = d_q.at[..., first:, :].add(d_scores @ k[..., keys, :])  # (..., Tq, D)
    d_k, d_v = jnp.concatenate(d_k, axis=-2), jnp.concatenate(d_v, axis=-2)
    if G > 1:  # each KV head's gradient: the sum over the G query heads it serves
        d_k, d_v = (
            d.reshape(*kv_shape[:-2], G, T, -1).sum(axis=-3) for d in (d_k, d_v)
        )
    return (d_q * scale_by).astype(dtype), d_k.astype(dtype), d_v.astype(dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def flash_attention_core(q, k, v, keep, settings):
    """(out, lse) of the kernel, with flash_backward as its gradient."""
    return flash_forward(q, k, v, keep, settings)


def flash_attention_core_forward(q, k, v, keep, settings):
    out, lse = flash_forward(q, k, v, keep, settings)
    return (out, lse), (q, k, v, keep, out, lse)


def flash_attention_core_backward(settings, saved, cotangents):
    d_out, d_lse = cotangents
    return (*flash_backward(*saved, d_out, d_lse, settings), None)


flash_attention_core.defvjp(flash_attention_core_forward, flash_attention_core_backward)
flash_attention_jit = jax.jit(flash_attention, static_argnames=(*FLASH_DEFAULTS,))
multi_head_flash_attention_jit = jax.jit(
    multi_head_flash_attention, static_argnames=("n_heads", *FLASH_DEFAULTS)
)
