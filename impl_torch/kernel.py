"""Flash attention in PyTorch: the online softmax of blockwise.py as a Triton kernel.

blockwise.py runs the online softmax as array operations, each a trip through
memory. Here it is one program per (batch x head, query block) that keeps its
query block and the running max m, sum l and accumulator acc on chip while it
loops over the key blocks up to the diagonal, then writes `out` and each
row's log-sum-exp. With a sliding window the loop starts at the first key block the
query block reaches; with grouped-query attention each program reads its KV
head's rows in place (never repeated in memory). Triton (`triton.jit`) writes
that program on pointers: each program finds its rows from its ids, computes
every address and masks every load past the end by hand. On a GPU it compiles;
on CPU tensors it runs in Triton's interpreter, which TRITON_INTERPRET=1 turns
on: Triton reads it as `triton.jit` makes each kernel, this module's when it is
imported. impl_jax/kernel.py is the same kernel in Pallas.

The backward pass is no kernel: a torch.autograd.Function recomputes the
weights one key block at a time from the saved lse, in torch (`flash_backward`).
docs/kernels.md maps every line to blockwise.py. This module needs Triton
(the `kernels` extra); `import impl_torch` does not import it.

Shape legend: ... batch, T sequence, C model width, H heads, D head width,
B block_size, N the batch axes and heads in one, Dp D padded; H_kv key/value
heads, G = H / H_kv, N_kv the batch axes and KV heads in one.
"""

from __future__ import annotations

import math

import torch

from impl_torch.arrays import FRAMEWORK
from impl_torch.attention import at_least_float32, finite_values, multi_head
from impl_torch.variants import nonfinite_in_window, repeat_kv, soft_cap
from shared.dtypes import dtype_name
from shared.registry import install_command
from shared.validation.kernels import (
    check_compiled_tile,
    check_flash,
    check_interpret,
    check_multi_head_flash,
    tile_size,
)

try:
    import triton
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction
except ImportError:
    raise ImportError(
        "impl_torch.kernel needs Triton, which is not installed: "
        + install_command("kernels")
        + " (on a CPU, Triton runs in its interpreter: TRITON_INTERPRET=1)"
    ) from None

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
    """Attention of per-head q, k, v (..., T, D) by the Triton kernel.

    Args:
        q, k, v: (..., T, D), one shape and one float dtype, D <= 256.
        mask: None, or a bool key mask broadcastable to (..., 1, T), True = may
            attend (as key_padding_mask makes).
        block_size: B, a power of two: the positions of a query or key block.
        causal, scale: as for blockwise_attention.
        interpret: Triton's interpreter (True), the kernel compiled for the GPU
            (False), or compiled on a GPU and interpreted elsewhere (None).
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
    interpret = check_interpret(
        interpret, on_gpu=q.is_cuda, where=q.device.type, language="Triton"
    )
    check_triton_runs(interpret, q.dtype)  # Triton only: its interpreter's limits
    if not interpret:
        check_compiled_tile(block_size, dims.D, dtype_name(q))
    if mask is None:
        keep = torch.ones(
            (*dims.batch, dims.T), dtype=torch.bool, device=q.device
        )  # (..., T)
    else:
        keep = torch.broadcast_to(mask, (*dims.batch, 1, dims.T))[..., 0, :]  # (..., T)
    # 7. (ahead) NaN in, NaN out, as in attention.py: the rows that attend a
    #    key whose value is not finite are set to NaN at the end
    finite = torch.isfinite(v).all(dim=-1)  # (..., T): keys with a finite value
    if n_kv_heads is not None:  # each query head's keys: its KV head's (GQA)
        G = q.shape[-3] // n_kv_heads
        finite = repeat_kv(finite[..., None], G)[..., 0]  # (..., H, T)
    nonfinite_so_far = (~finite & keep).cumsum(dim=-1) > 0  # (..., T)
    attends_nonfinite = nonfinite_so_far if causal else nonfinite_so_far[..., -1:]
    if window is not None:  # only a key within the row's window: variants.py
        attends_nonfinite = nonfinite_in_window(finite | ~keep, window)  # (..., T)
    scale_by = 1.0 / math.sqrt(dims.D) if scale else 1.0
    settings = (block_size, causal, scale_by, interpret, window, softcap)
    out, lse = flash_attention_core(q, k, finite_values(v), keep, settings)
    out = out.masked_fill(attends_nonfinite[..., None], math.nan)  # NaN in, NaN out
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


@triton.jit
def key_blocks(i, T, BLOCK: tl.constexpr, CAUSAL: tl.constexpr, WINDOW: tl.constexpr):
    """The key blocks [first, stop) query block i visits: up to the diagonal
    (causal) or all of them; from block 0, or with a window of W keys from the
    block of key i * B - W + 1, the first its first row reaches."""
    stop = i + 1 if CAUSAL else tl.cdiv(T, BLOCK)
    first = 0
    if WINDOW is not None:
        first = tl.maximum(i * BLOCK - WINDOW + 1, 0) // BLOCK
    return first, stop


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


@triton.jit
def soft_cap_kernel(scores, cap):
    """variants.soft_cap, cap * tanh(scores / cap), with tanh(x) = 2 sigmoid(2x)
    - 1: Triton's tanh is libdevice's, which its interpreter cannot run; off
    by about one unit of the cap's size (docs/kernels.md)."""
    return cap * (2 * tl.sigmoid(2 * scores / cap) - 1)


def check_triton_runs(interpret, dtype):
    """Raise ValueError where Triton cannot run the kernel as asked: its
    interpreter set otherwise for this process, or bfloat16 in it."""
    interpreted = isinstance(flash_kernel, InterpretedFunction)
    if interpret and not interpreted:
        raise ValueError(
            "Triton's interpreter is off in this process, and Triton runs CPU "
            "tensors only there: set TRITON_INTERPRET=1 before Triton is "
            "imported (TRITON_INTERPRET=1 python ...), or put them on a GPU"
        )
    if not interpret and interpreted:
        raise ValueError(
            "interpret=False (or None with CUDA tensors) asks for the compiled "
            "kernel, but Triton's interpreter is on in this process "
            "(TRITON_INTERPRET=1 when Triton was imported): pass interpret=True"
        )
    if interpret and dtype == torch.bfloat16:
        raise ValueError(
            "bfloat16 does not run in Triton's interpreter (its tl.dot multiplies "
            "bfloat16 bit patterns as integers: triton-lang/triton#11584): use "
            "float16, float32 or float64 on a CPU, or bfloat16 on a GPU"
        )


def flash_backward(q, k, v, keep, out, lse, d_out, d_lse, settings):
    """The gradients of (out, lse) for q, k, v: FlashAttention-2's backward in
    torch, one key block at a time, the weights exp(score - lse) recomputed
    from the saved lse; memory O(T * B), never (T, T). With GQA, k and v
    (..., H_kv, T, D) are repeated here, and their gradients summed back."""
    block_size, causal, scale_by, _, window, softcap = settings
    dtype, T, kv_shape = q.dtype, q.shape[-2], k.shape
    G = 1 if k.shape == q.shape else q.shape[-3] // k.shape[-3]
    k, v = (repeat_kv(a, G) if G > 1 else a for a in (k, v))  # (..., H, T, D)
    q, k, v, out, d_out = (at_least_float32(a) for a in (q, k, v, out, d_out))
    q = q * scale_by  # the queries the scores were made of
    lse = torch.where(lse == -math.inf, 0.0, lse)[..., None]  # (..., T, 1)
    # (..., T, 1): d_out . out, what softmax's backward subtracts, less lse's share
    delta = (d_out * out).sum(dim=-1, keepdim=True) - d_lse[..., None]
    d_q, d_k, d_v = torch.zeros_like(q), [], []
    positions = torch.arange(T, device=q.device)
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
        scores = torch.where(allowed, scores, -math.inf)  # (..., Tq, Bk)
        weights = torch.exp(scores - lse[..., first:, :])  # (..., Tq, Bk)
        d_v.append(weights.mT @ d_out_rows)  # (..., Bk, Tq) @ (..., Tq, D)
        d_weights = d_out_rows @ v[..., keys, :].mT  # (..., Tq, Bk)
        d_scores = weights * (d_weights - delta[..., first:, :])  # (..., Tq, Bk)
        if softcap is not None:
            d_scores = d_scores * slope  # (..., Tq, Bk)
        d_k.append(d_scores.mT @ q_rows)  # (..., Bk, Tq) @ (..., Tq, D)
        d_q[..., first:, :] += d_scores @ k[..., keys, :]  # (..., Tq, D)
    d_k, d_v = torch.cat(d_k, dim=-2), torch.cat(d_v, dim=-2)
    if G > 1:  # each KV head's gradient: the sum over the G query heads it serves
        d_k, d_v = (d.reshape(*kv_shape[:-2], G, T, -1).sum(dim=-3) for d in (d_k, d_v))
    return (d_q * scale_by).to(dtype), d_k.to(dtype), d_v.to(dtype)


class FlashAttentionCore(torch.autograd.Function):
    """(out, lse) of the kernel, with flash_backward as its gradient."""

    @staticmethod
    def forward(ctx, q, k, v, keep, settings):
        out, lse = flash_forward(q, k, v, keep, settings)
        ctx.save_for_backward(q, k, v, keep, out, lse)
        ctx.settings = settings
        return out, lse

    @staticmethod
    def backward(ctx, d_out, d_lse):
        grads = flash_backward(*ctx.saved_tensors, d_out, d_lse, ctx.settings)
        return (*grads, None, None)  # none for keep and settings


flash_attention_core = FlashAttentionCore.apply
