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
# # sharded.py: attention across devices, in NumPy
#
# Sharded causal attention in NumPy: N devices, played in turn by one process.
#
# Two ways to split attention across N devices (docs/sharding.md):
# `head_parallel_attention` gives each device H / N heads over every row, and
# `ring_attention` gives each device its rows and passes the keys and values
# round a ring of devices, merging each block into the running softmax of
# blockwise.py. Both take the rows of `shard_sequence`: the zigzag layout of
# shared/sharding.py, two chunks per device, so that no device idles on
# masked blocks. Here the devices are a list and a message is a list shifted
# by one: the plain version of what impl_torch and impl_jax run on their engines.
#
# Shape legend as in attention.py; N devices, c the positions of one chunk,
# R = 2c the rows one device holds, Tp = N * R the padded sequence.
#
# The first code cell installs the project where it is missing (in Colab). The
# functions are `impl_numpy/sharded.py`'s, as the page shows them: edit one and
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

from impl_numpy.arrays import FRAMEWORK
from impl_numpy.attention import (
    at_least_float32, attend, causal_mask, finite_values, key_padding_mask,
    merge_heads, nan_where_nonfinite_attended, project, split_heads,
    unpack_biases,
)
from impl_numpy.blockwise import online_softmax_step
from impl_numpy.sharded import empty_states, finish, part
from shared.sharding import zigzag_positions
from shared.validation.sharded import (
    check_head_shards, check_sequence_shards, check_sharded,
)

# %%
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

# %%
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

# %%
def attend_block(state, q, k, v, allowed):
    """Keys and values (..., H, Bk, D) into the running (m, l, acc) of queries
    q (..., H, Bq, D); `allowed` (..., Bq, Bk) bool says who may attend whom."""
    state = online_softmax_step(state, q, k, finite_values(v), ~allowed)  # steps 3-7
    row_max, row_sum, acc = state
    acc = nan_where_nonfinite_attended(acc, v, allowed)  # NaN in, NaN out
    return row_max, row_sum, acc

# %%
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

# %% [markdown]
# Not in NumPy's sharded.py: `ring_on_device` (JAX's), `pass_on` (PyTorch's and
# JAX's). No such lines here: this framework does it otherwise (their files say
# how, in comments).

# %% [markdown]
# ## Against the float64 oracle, in float32

# %%
from impl_numpy.arrays import from_numpy, to_numpy
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
from impl_numpy.sharded import unshard_sequence

# the sequence of T = 6 cut over N = 3 devices, zigzag: device r holds chunks
# r and 2N - 1 - r of 2N, so that each has as much of the causal triangle to
# compute; here a device is an item of a list (torch's notebook runs the same
# ring in processes over gloo, JAX's on a mesh of devices: docs/sharding.md)
shards, keep = shard_sequence(f32(x), n_devices=3)  # 3 x (B, 2, C), 3 x (B, 2)
# run as written, one operation at a time
ring = ring_attention
out = unshard_sequence(ring(shards, *map(f32, w), 2, keep), 6)  # (B, T, C)
what = "the ring over 3 devices, two heads"
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
