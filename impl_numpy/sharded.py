"""Sharded causal attention in NumPy: N devices, played in turn by one process.

Two ways to split attention across N devices (docs/sharding.md):
`head_parallel_attention` gives each device H / N heads over every row, and
`ring_attention` gives each device its rows and passes the keys and values
round a ring of devices, merging each block into the running softmax of
blockwise.py. Both take the rows of `shard_sequence`: the zigzag layout of
shared/sharding.py, two chunks per device, so that no device idles on
masked blocks. Here the devices are a list and a message is a list shifted
by one: the plain version of what impl_torch and impl_jax run on their engines.

Shape legend as in attention.py; N devices, c the positions of one chunk,
R = 2c the rows one device holds, Tp = N * R the padded sequence.
"""

from __future__ import annotations

import math

import numpy as np

from impl_numpy.arrays import FRAMEWORK
from impl_numpy.attention import (
    at_least_float32,
    attend,
    causal_mask,
    finite_values,
    key_padding_mask,
    merge_heads,
    nan_where_nonfinite_attended,
    project,
    split_heads,
    unpack_biases,
)
from impl_numpy.blockwise import online_softmax_step
from shared.sharding import inverse_positions, zigzag_positions
from shared.validation.sharded import (
    check_head_shards,
    check_sequence_shards,
    check_sharded,
)


def shard_sequence(x, key_padding=None, *, n_devices):
    """Cut x (..., T, C) into the rows of N devices, in the zigzag layout.

    Args:
        key_padding: None, or what `key_padding_mask` takes: integer lengths
            (...,) or a bool keep array (..., T).

    Returns:
        A list of N arrays (..., R, C), and a list of N bool keep arrays
        (..., R): False at padded keys, and at the padding up to Tp.
    """
    T = x.shape[-2]
    N = check_sequence_shards(T, n_devices)
    # ring 1. cut the sequence into 2N chunks, two per device (zigzag)
    positions = zigzag_positions(T, N)  # (N, R), positions >= T are padding
    Tp = positions.size
    keep = np.ones(x.shape[:-1], dtype=bool)  # (..., T)
    if key_padding is not None:
        keep = key_padding_mask(key_padding, T)[..., 0, :]  # (..., T)
    x = np.concatenate([x, np.zeros_like(x[..., : Tp - T, :])], axis=-2)
    keep = np.concatenate([keep, np.zeros_like(keep[..., : Tp - T])], axis=-1)
    x_shards = [x[..., rows, :] for rows in positions]  # N x (..., R, C)
    keep_shards = [keep[..., rows] for rows in positions]  # N x (..., R)
    return x_shards, keep_shards


def unshard_sequence(out, T):
    """The devices' rows (N arrays (..., R, C)) back in order: (..., T, C)."""
    rows = np.concatenate(out, axis=-2)  # (..., Tp, C), device after device
    return rows[..., inverse_positions(T, len(out)), :]  # (..., T, C)


def ring_attention(x, w_q, w_k, w_v, w_o, n_heads, keep, *, scale=True, biases=None):
    """Causal multi-head attention, the sequence split across N devices.

    Args:
        x, keep: lists of N arrays (..., R, C) and (..., R), from `shard_sequence`.
        w_q, w_k, w_v, w_o, n_heads, scale, biases: as for `multi_head_attention`.

    Returns:
        A list of N arrays (..., R, C): each device's rows of the output.
    """
    N = len(x)
    for rows, padding in zip(x, keep, strict=True):
        check_sharded(
            rows, w_q, w_k, w_v, w_o, n_heads, padding, biases=biases,
            framework=FRAMEWORK,
        )  # fmt: skip
    b_q, b_k, b_v, b_o = unpack_biases(biases)
    # 1. project x into queries, keys and values
    q = [project(rows, w_q, b_q) for rows in x]  # (..., R, C) @ (C, C) -> (..., R, C)
    k = [project(rows, w_k, b_k) for rows in x]  # (..., R, C) @ (C, C) -> (..., R, C)
    v = [project(rows, w_v, b_v) for rows in x]  # (..., R, C) @ (C, C) -> (..., R, C)
    # 2. split heads (multi-head only)
    q = [at_least_float32(split_heads(t, n_heads)) for t in q]  # (..., H, R, D)
    k = [at_least_float32(split_heads(t, n_heads)) for t in k]  # (..., H, R, D)
    v = [at_least_float32(split_heads(t, n_heads)) for t in v]  # (..., H, R, D)
    # 4. scale by 1 / sqrt(D), once on the queries
    if scale:
        q = [t * (1.0 / math.sqrt(t.shape[-1])) for t in q]  # (..., H, R, D)
    states = [empty_states(t) for t in q]  # per device: its two chunks' (m, l, acc)
    held = list(zip(k, v, keep, strict=True))  # per device: the block it holds
    for step in range(N):
        # ring 3. pass the key/value block on to the next device
        incoming = held[-1:] + held[:-1]  # device rank gets rank - 1's block
        # ring 2. attend the queries held to the key/value block held
        states = [
            ring_step(states[rank], q[rank], held[rank], step, rank)
            for rank in range(N)
        ]
        held = incoming  # (the engines send it while they compute)
    # ring 4. normalize, merge heads, output projection
    return [finish(chunks, w_o, b_o, x[0].dtype) for chunks in states]


def head_parallel_attention(
    x, w_q, w_k, w_v, w_o, n_heads, keep, *, scale=True, biases=None
):
    """Causal multi-head attention, the heads split across N devices.

    Args, Returns: as for `ring_attention`; N must divide n_heads.
    """
    N = len(x)
    for rows, padding in zip(x, keep, strict=True):
        dims = check_sharded(
            rows, w_q, w_k, w_v, w_o, n_heads, padding, biases=biases,
            framework=FRAMEWORK,
        )  # fmt: skip
    b_q, b_k, b_v, b_o = unpack_biases(biases)
    H_local = check_head_shards(dims.H, N)
    # heads 1. gather every device's rows (all-gather)
    x_all = np.concatenate(x, axis=-2)  # (..., Tp, C), device after device
    keep_all = np.concatenate(keep, axis=-1)  # (..., Tp)
    # causal is "position j <= position i", whatever order the rows are in
    positions = zigzag_positions(x_all.shape[-2], N).ravel()  # (Tp,)
    allowed = positions[None, :] <= positions[:, None]  # (Tp, Tp)
    allowed = allowed & keep_all[..., None, None, :]  # (..., 1, Tp, Tp)
    partial = []  # per device: its heads' share of the output, every row
    for rank in range(N):
        # this device's heads: columns of w_q, w_k, w_v and rows of w_o
        cols = slice(rank * dims.C // N, (rank + 1) * dims.C // N)
        # 1. project x into queries, keys and values
        q = project(x_all, w_q[:, cols], part(b_q, cols))  # (..., Tp, C/N)
        k = project(x_all, w_k[:, cols], part(b_k, cols))  # (..., Tp, C/N)
        v = project(x_all, w_v[:, cols], part(b_v, cols))  # (..., Tp, C/N)
        # 2. split heads (multi-head only)
        q = split_heads(q, H_local)  # (..., Tp, C/N) -> (..., H/N, Tp, D)
        k = split_heads(k, H_local)  # (..., Tp, C/N) -> (..., H/N, Tp, D)
        v = split_heads(v, H_local)  # (..., Tp, C/N) -> (..., H/N, Tp, D)
        # heads 2. attend with this device's heads
        out, _ = attend(q, k, v, allowed, scale)  # steps 3 to 7
        # 7. (continued) merge heads, output projection
        out = merge_heads(out.astype(x_all.dtype))  # (..., Tp, C/N)
        partial.append(project(out, w_o[cols, :]))  # (..., Tp, C/N) @ (C/N, C)
    # heads 3. sum the heads' outputs, each device keeping its rows (reduce-scatter)
    total = sum(partial)  # (..., Tp, C)
    R = x[0].shape[-2]
    out = [total[..., rank * R : (rank + 1) * R, :] for rank in range(N)]
    return [t if b_o is None else t + b_o for t in out]  # N x (..., R, C)


def ring_step(states, q, held, step, rank):
    """Step `step` of the ring on device `rank`: its queries q (..., H, R, D),
    chunks rank and 2N - 1 - rank, attend the block it holds, that of device
    j = rank - step (mod N): chunks j and 2N - 1 - j (docs/sharding.md)."""
    first, second = states  # the running (m, l, acc) of each of its chunks
    k, v, keep = held  # (..., H, R, D), (..., H, R, D), (..., R)
    c = q.shape[-2] // 2
    q_first, q_second = q[..., :c, :], q[..., c:, :]  # (..., H, c, D)
    keep = keep[..., None, None, :]  # (..., 1, 1, R): the same keys for every row
    if step == 0:  # its own chunks, in order: the causal mask of its rows
        causal = causal_mask(2 * c)  # (R, R)
        first = attend_block(
            first, q_first, k[..., :c, :], v[..., :c, :], causal[:c, :c] & keep[..., :c]
        )
        second = attend_block(second, q_second, k, v, causal[c:] & keep)
    elif step <= rank:  # j < rank: chunk j is before both, 2N - 1 - j after both
        first = attend_block(
            first, q_first, k[..., :c, :], v[..., :c, :], keep[..., :c]
        )
        second = attend_block(
            second, q_second, k[..., :c, :], v[..., :c, :], keep[..., :c]
        )
    else:  # j > rank: both after its first chunk, both before its second
        second = attend_block(second, q_second, k, v, keep)
    return first, second


def attend_block(state, q, k, v, allowed):
    """Keys and values (..., H, Bk, D) into the running (m, l, acc) of queries
    q (..., H, Bq, D); `allowed` (..., Bq, Bk) bool says who may attend whom."""
    state = online_softmax_step(state, q, k, finite_values(v), ~allowed)  # steps 3-7
    row_max, row_sum, acc = state
    acc = nan_where_nonfinite_attended(acc, v, allowed)  # NaN in, NaN out
    return row_max, row_sum, acc


def empty_states(q):
    """The running (m, l, acc) of no key yet, for each of the two chunks of q."""
    c = q.shape[-2] // 2
    return tuple(empty_state(t) for t in (q[..., :c, :], q[..., c:, :]))


def empty_state(q):
    """(m, l, acc) of no key yet for queries q (..., H, c, D)."""
    row_max = np.full_like(q[..., 0], -np.inf)  # (..., H, c)
    return row_max, np.zeros_like(q[..., 0]), np.zeros_like(q)  # l, acc


def finish(states, w_o, b_o, dtype):
    """One device's output rows (..., R, C) from its two chunks' (m, l, acc)."""
    out = [acc / np.where(sum_ > 0, sum_, 1.0)[..., None] for _, sum_, acc in states]
    out = np.concatenate(out, axis=-2).astype(dtype)  # (..., H, R, D); l = 0: 0
    out = merge_heads(out)  # (..., H, R, D) -> (..., R, C)
    return project(out, w_o, b_o)  # (..., R, C) @ (C, C) -> (..., R, C)


def part(b, cols):
    """The columns `cols` of a bias, or None."""
    return None if b is None else b[cols]
