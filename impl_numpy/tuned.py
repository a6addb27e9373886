"""Causal self-attention tuned for speed on a CPU, in NumPy: not on the reading path.

What blockwise.py's reader does next, kept apart so that the teaching code
stays short: one (C, 3C) product for q, k and v with the scale folded in, the
heads laid out once (k transposed), query blocks of exact softmax one head at
a time, the block size from a measured rule, and the blocks shared among
threads, each running whole blocks on a one-thread BLAS (as PyTorch's CPU
flash kernel shares its blocks) where NumPy's BLAS would split each small
product. Why each, and what it bought: docs/bench.md, "Our attention against
the fused kernels". The bench mode `numpy-tuned`; tests/test_tuned.py holds it
to the float64 oracle. The NaN rule is attention.py's.

Shape legend: ... batch, T sequence, C model width, H heads, D head width,
Bq query block.
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from impl_numpy.arrays import FRAMEWORK
from impl_numpy.attention import at_least_float32, finite_values
from shared.validation.attention import check_multi_head
from shared.validation.blockwise import check_block_size, check_workers

QUERY_BLOCK = 128  # Bq, the fastest measured at T = 2048 to 8192 (docs/bench.md)


def query_block_size(T):
    """Bq: QUERY_BLOCK, never more than T."""
    return max(1, min(QUERY_BLOCK, T))


def multi_head_tuned_attention(
    x, w_q, w_k, w_v, w_o, n_heads, *, block_size=None, workers=None
):
    """Multi-head causal self-attention, as `multi_head_attention` computes it,
    without the weights.

    Args:
        x: (..., T, C). w_q, w_k, w_v, w_o: (C, C) projections, x @ w.
        n_heads: H, which must divide C.
        block_size: Bq, the queries of one block; None: `query_block_size`.
        workers: threads that each attend whole query blocks, with NumPy's
            BLAS on one thread meanwhile (a setting of the whole process: the
            caller's other threads get one BLAS thread too until the call
            returns; docs/bench.md, "Threads over blocks"); None: as many as
            NumPy's BLAS has now (`blas_threads`).

    Returns:
        out (..., T, C) in x's dtype.
    """
    H = check_multi_head(x, w_q, w_k, w_v, w_o, n_heads, framework=FRAMEWORK)[0].H
    block_size = None if block_size is None else check_block_size(block_size)
    n_workers = blas_threads() if workers is None else check_workers(workers)
    dtype = x.dtype
    x, w_q, w_k, w_v, w_o = (at_least_float32(a) for a in (x, w_q, w_k, w_v, w_o))
    *batch, T, C = x.shape
    D = C // H
    Bq = block_size or query_block_size(T)
    # q, k and v in one product, the scale folded into w_q
    w_qkv = np.concatenate([w_q * (1.0 / math.sqrt(D)), w_k, w_v], axis=-1)  # (C, 3C)
    qkv = (x @ w_qkv).reshape(-1, T, 3, H, D)  # (N, T, 3, H, D), N = batch
    q, v = (heads_first(qkv[:, :, i]) for i in (0, 2))  # (N H, T, D) each
    k_t = np.ascontiguousarray(qkv[:, :, 1].transpose(0, 2, 3, 1)).reshape(-1, D, T)
    v_finite = finite_values(v)  # (N H, T, D): 0 * NaN is NaN
    future = np.triu(np.ones((Bq, Bq), dtype=bool), 1)  # (Bq, Bq), True for j > i
    heads = np.empty_like(q)  # (N H, T, D)
    errors = np.geterr()  # np.errstate is per thread: the workers take the caller's

    def attend_block(start):
        stop = min(start + Bq, T)
        n = stop - start
        with np.errstate(**errors):
            for head in range(len(q)):  # one (n, stop) block of scores at a time
                scores = q[head, start:stop] @ k_t[head, :, :stop]  # (n, stop)
                np.copyto(scores[:, start:], -np.inf, where=future[:n, :n])
                scores -= scores.max(axis=-1, keepdims=True)
                np.exp(scores, out=scores)  # not yet normalized
                block = scores @ v_finite[head, :stop]  # (n, D)
                block /= scores.sum(axis=-1, keepdims=True)  # n x D, not n x stop
                heads[head, start:stop] = block

    starts = range(0, T, Bq)
    if n_workers == 1 or len(starts) == 1:
        for start in starts:
            attend_block(start)
    else:  # the last blocks are the longest: first, so that none is left alone
        with _one_blas_thread(), ThreadPoolExecutor(n_workers) as pool:
            list(pool.map(attend_block, reversed(starts)))
    # NaN in, NaN out: a row that attends a key whose value is not finite
    finite = np.isfinite(v).all(axis=-1)  # (N H, T)
    attends_nonfinite = np.cumsum(~finite, axis=-1) > 0  # (N H, T)
    np.copyto(heads, np.nan, where=attends_nonfinite[..., None])
    merged = heads.reshape(-1, H, T, D).transpose(0, 2, 1, 3).reshape(*batch, T, C)
    out = merged @ w_o  # (..., T, C) @ (C, C) -> (..., T, C)
    return out.astype(dtype, copy=False)


def heads_first(a):
    """(N, T, H, D) -> (N H, T, D), laid out anew: each head's (T, D) rows one
    after the other."""
    N, T, H, D = a.shape
    return np.ascontiguousarray(a.transpose(0, 2, 1, 3)).reshape(N * H, T, D)


# Threads. NumPy's BLAS splits each product among its threads, and a block's
# products, (Bq, D) @ (D, T) per head, are too small to split well, while the
# softmax's ufuncs run on one thread (docs/bench.md, "Threads over blocks").
# Threads that each attend whole blocks, every product on one BLAS thread,
# share only the inputs they read; each writes its own rows of `heads`.


@functools.cache
def _blas():
    """threadpoolctl's controller of NumPy's own BLAS: the one its wheel ships
    (numpy.libs, numpy/.dylibs), else every BLAS loaded when first asked (a
    NumPy linked to a system BLAS). Found once; NumPy loads its BLAS on import."""
    from threadpoolctl import ThreadpoolController

    blas = ThreadpoolController().select(user_api="blas")
    root = Path(np.__file__).parent
    own = [
        info["filepath"]
        for info in blas.info()
        if Path(info["filepath"]).is_relative_to(root)
        or Path(info["filepath"]).parent.name == "numpy.libs"
    ]
    return blas.select(filepath=own) if own else blas


def blas_threads() -> int:
    """The threads of NumPy's BLAS now (1 if threadpoolctl cannot tell)."""
    counts = [info["num_threads"] for info in _blas().info()]
    return max(1, min(counts, default=1))


_ONE_BLAS_THREAD = threading.RLock()


@contextlib.contextmanager
def _one_blas_thread():
    """NumPy's BLAS on one thread inside, as it was after. BLAS threads are a
    setting of the whole process: a lock keeps two calls from overlapping, so
    that each restores what it found."""
    with _ONE_BLAS_THREAD, _blas().limit(limits=1):
        yield
