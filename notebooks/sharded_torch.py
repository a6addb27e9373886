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
# # sharded.py: attention across devices, in PyTorch
#
# Sharded causal attention in PyTorch: one process per device, explicit messages.
#
# Two ways to split attention across N devices (docs/sharding.md):
# `head_parallel_attention` gives each device H / N heads over every row, and
# `ring_attention` gives each device its rows and passes the keys and values
# round a ring of devices, merging each block into the running softmax of
# blockwise.py. Both take the rows of `shard_sequence`: the zigzag layout of
# shared/sharding.py, two chunks per device, so that no device idles on
# masked blocks. Every process runs this code on its own rows, after
# `torch.distributed.init_process_group` (gloo on CPU, nccl on GPU); the
# messages are torch.distributed's collectives and point-to-point sends.
#
# Shape legend as in attention.py; N devices, c the positions of one chunk,
# R = 2c the rows one device holds, Tp = N * R the padded sequence.
#
# The first code cell installs the project where it is missing (in Colab). The
# functions are `impl_torch/sharded.py`'s, as the page shows them: edit one and
# rerun the cells below it.

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
import math

import numpy as np
import torch
import torch.distributed as dist

from impl_torch.arrays import FRAMEWORK
from impl_torch.attention import (
    at_least_float32, attend, causal_mask, finite_values, key_padding_mask,
    merge_heads, nan_where_nonfinite_attended, project, split_heads,
    unpack_biases,
)
from impl_torch.blockwise import online_softmax_step
from impl_torch.sharded import (
    empty_states, finish, gather_rows, part, sum_rows,
)
from shared.sharding import zigzag_positions
from shared.validation.sharded import (
    check_head_shards, check_sequence_shards, check_sharded,
)

# %%
def shard_sequence(x, key_padding=None, *, group=None):
    """This device's rows of x (..., T, C), in the zigzag layout.

    Args:
        key_padding: None, or what `key_padding_mask` takes: integer lengths
            (...,) or a bool keep array (..., T).
        group: the process group of the N devices (None: the default one).

    Returns:
        x's rows (..., R, C), and a bool keep (..., R): False at padded keys,
        and at the padding up to Tp.
    """
    T = x.shape[-2]
    N = check_sequence_shards(T, dist.get_world_size(group))
    # ring 1. cut the sequence into 2N chunks, two per device (zigzag)
    positions = torch.from_numpy(zigzag_positions(T, N)).to(x.device)  # (N, R)
    Tp = positions.numel()
    keep = torch.ones(x.shape[:-1], dtype=torch.bool, device=x.device)  # (..., T)
    if key_padding is not None:
        keep = key_padding_mask(key_padding, T)[..., 0, :]  # (..., T)
    x = torch.cat([x, torch.zeros_like(x[..., : Tp - T, :])], dim=-2)
    keep = torch.cat([keep, torch.zeros_like(keep[..., : Tp - T])], dim=-1)
    rows = positions[dist.get_rank(group)]  # (R,)
    return x[..., rows, :], keep[..., rows]  # (..., R, C), (..., R)

# %%
def ring_attention(
    x, w_q, w_k, w_v, w_o, n_heads, keep, *, scale=True, biases=None, group=None
):
    """Causal multi-head attention, the sequence split across N devices.

    Args:
        x, keep: this device's (..., R, C) and (..., R), from `shard_sequence`.
        w_q, w_k, w_v, w_o, n_heads, scale, biases: as for `multi_head_attention`.
        group: the process group of the N devices (None: the default one).

    Returns:
        (..., R, C): this device's rows of the output.
    """
    N, rank = dist.get_world_size(group), dist.get_rank(group)
    check_sharded(
        x, w_q, w_k, w_v, w_o, n_heads, keep, biases=biases, framework=FRAMEWORK
    )
    b_q, b_k, b_v, b_o = unpack_biases(biases)
    # 1. project x into queries, keys and values
    q = project(x, w_q, b_q)  # (..., R, C) @ (C, C) -> (..., R, C)
    k = project(x, w_k, b_k)  # (..., R, C) @ (C, C) -> (..., R, C)
    v = project(x, w_v, b_v)  # (..., R, C) @ (C, C) -> (..., R, C)
    # 2. split heads (multi-head only)
    q = at_least_float32(split_heads(q, n_heads))  # (..., H, R, D)
    k = at_least_float32(split_heads(k, n_heads)).contiguous()  # (..., H, R, D)
    v = at_least_float32(split_heads(v, n_heads)).contiguous()  # (..., H, R, D)
    # 4. scale by 1 / sqrt(D), once on the queries
    if scale:
        q = q * (1.0 / math.sqrt(q.shape[-1]))  # (..., H, R, D)
    states = empty_states(q)  # its two chunks' (m, l, acc)
    held = (k, v, keep.contiguous())  # the block it holds
    for step in range(N):
        # ring 3. pass the key/value block on to the next device
        if step < N - 1:  # sent and received while this step computes
            requests, incoming = pass_on(held, group)
        # ring 2. attend the queries held to the key/value block held
        states = ring_step(states, q, held, step, rank)
        if step < N - 1:
            for request in requests:
                request.wait()  # within the process group's timeout
            held = incoming  # device rank now holds rank - 1's block
    # ring 4. normalize, merge heads, output projection
    return finish(states, w_o, b_o, x.dtype)

# %%
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
        causal = causal_mask(2 * c, device=q.device)  # (R, R)
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

# %%
def attend_block(state, q, k, v, allowed):
    """Keys and values (..., H, Bk, D) into the running (m, l, acc) of queries
    q (..., H, Bq, D); `allowed` (..., Bq, Bk) bool says who may attend whom."""
    state = online_softmax_step(state, q, k, finite_values(v), ~allowed)  # steps 3-7
    row_max, row_sum, acc = state
    acc = nan_where_nonfinite_attended(acc, v, allowed)  # NaN in, NaN out
    return row_max, row_sum, acc

# %%
def pass_on(held, group):
    """Start sending the block held to device rank + 1, and receiving rank - 1's.

    Returns:
        The requests to wait for, and the tensors the block arrives in.
    """
    N, rank = dist.get_world_size(group), dist.get_rank(group)
    incoming = tuple(torch.empty_like(t) for t in held)
    sends = [
        dist.P2POp(dist.isend, t, group=group, group_peer=(rank + 1) % N) for t in held
    ]
    receives = [
        dist.P2POp(dist.irecv, t, group=group, group_peer=(rank - 1) % N)
        for t in incoming
    ]
    return dist.batch_isend_irecv(sends + receives), incoming

# %%
def head_parallel_attention(
    x, w_q, w_k, w_v, w_o, n_heads, keep, *, scale=True, biases=None, group=None
):
    """Causal multi-head attention, the heads split across N devices.

    Args, Returns: as for `ring_attention`; N must divide n_heads.
    """
    N, rank = dist.get_world_size(group), dist.get_rank(group)
    dims = check_sharded(
        x, w_q, w_k, w_v, w_o, n_heads, keep, biases=biases, framework=FRAMEWORK
    )
    b_q, b_k, b_v, b_o = unpack_biases(biases)
    H_local = check_head_shards(dims.H, N)
    # heads 1. gather every device's rows (all-gather)
    x_all = gather_rows(x, -2, group)  # (..., Tp, C), device after device
    keep_all = gather_rows(keep, -1, group)  # (..., Tp)
    # causal is "position j <= position i", whatever order the rows are in
    positions = zigzag_positions(x_all.shape[-2], N).ravel()  # (Tp,)
    positions = torch.from_numpy(positions).to(x.device)
    allowed = positions[None, :] <= positions[:, None]  # (Tp, Tp)
    allowed = allowed & keep_all[..., None, None, :]  # (..., 1, Tp, Tp)
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
    out = merge_heads(out.to(x.dtype))  # (..., Tp, C/N)
    out = project(out, w_o[cols, :])  # (..., Tp, C/N) @ (C/N, C) -> (..., Tp, C)
    # heads 3. sum the heads' outputs, each device keeping its rows (reduce-scatter)
    out = sum_rows(out, group)  # (..., R, C)
    return out if b_o is None else out + b_o

# %% [markdown]
# Not in PyTorch's sharded.py: `ring_on_device` (JAX's). No such lines here: this
# framework does it otherwise (their files say how, in comments).

# %% [markdown]
# ## Against the float64 oracle, in float32

# %%
from impl_torch.arrays import from_numpy, to_numpy
from shared.reference import reference_multi_head
from shared.tolerances import tolerance


def f32(a):  # a NumPy array as the framework's float32 array
    return from_numpy(np.asarray(a), "float32")


def f64(a):  # back to NumPy, in float64
    return np.asarray(to_numpy(a), np.float64)


ATOL, RTOL = tolerance("float32")  # float32's tolerance (docs/suite.md)
rng = np.random.default_rng(0)
x = rng.standard_normal((2, 6, 8))  # (B, T, C)
w = [rng.standard_normal((8, 8)) / math.sqrt(8) for _ in range(4)]  # (C, C)

# %%
import datetime

import torch.multiprocessing as mp

from impl_torch.sharded import unshard_sequence


def device(rank, port, result):
    """What each of the N = 3 processes runs: it joins the process group,
    takes its rows of the sequence of T = 6 (zigzag: chunks rank and
    2N - 1 - rank of 2N), runs the ring on them and gathers every device's
    rows; rank 0 writes the output into `result`, shared with this one."""
    # one thread: a fork copies none of the threads of torch's pool, which the
    # cells above may have started, and a process waiting on them would hang
    torch.set_num_threads(1)
    timeout = datetime.timedelta(seconds=60)  # a message waited for, at most
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=3,
                            timeout=timeout)
    try:
        rows, keep = shard_sequence(f32(x))  # this device's (B, 2, C), (B, 2)
        out = ring(rows, *map(f32, w), 2, keep)  # this device's (B, 2, C)
        out = unshard_sequence(out, 6)  # every device's rows (B, T, C)
        if rank == 0:
            result.copy_(out)
    finally:
        dist.destroy_process_group()


# run as written, one operation at a time
ring = ring_attention
# a device is a process: three forked from this one, so that they run the
# cells above as last run (fork: Linux's, as in Colab, and macOS's, untried
# there; Windows has none), joined over gloo through a store this process
# holds on a port the system picks (an error in one process may show as
# another's "Connection closed by peer": the group lost it)
store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
out = torch.zeros(x.shape, dtype=torch.float64).share_memory_()  # (B, T, C)
args = (store.port, out)  # each process's, after its rank: rank 0 writes out
mp.start_processes(device, args, nprocs=3, start_method="fork")  # and waits
what = "the ring over 3 processes, two heads"
expected, _ = reference_multi_head(x, *w, 2)
distance = np.abs(f64(out) - expected).max()
print(f"{what}: max |out - oracle| = {distance:.2e}")
assert np.allclose(f64(out), expected, atol=ATOL, rtol=RTOL)

# %% [markdown]
# Try it: in `ring_step` write `step < rank` for `step <= rank`, rerun: at step r
# device r holds device 0's block, chunks 0 and 2N - 1, and now attends it as if
# both came after its first chunk: its first chunk misses the keys of chunk 0,
# its second attends those of chunk 2N - 1, in its future, and the distance
# grows.
