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
# # sharded.py: attention across devices, in JAX
#
# Sharded causal attention in JAX: one program over a mesh of devices.
#
# Two ways to split attention across N devices (docs/sharding.md):
# `head_parallel_attention` gives each device H / N heads over every row, and
# `ring_attention` gives each device its rows and passes the keys and values
# round a ring of devices, merging each block into the running softmax of
# blockwise.py. Both take the rows of `shard_sequence`: the zigzag layout of
# shared/sharding.py, two chunks per device, so that no device idles on
# masked blocks. The arrays are global, placed on a `Mesh` with
# `NamedSharding`: under `jax.jit` the heads strategy is the plain attention
# with sharding constraints, and XLA inserts the collectives; the ring is
# written per device with `jax.shard_map` and `lax.ppermute`.
#
# Shape legend as in attention.py; N devices, c the positions of one chunk,
# R = 2c the rows one device holds, Tp = N * R the padded sequence.
#
# The first code cell installs the project where it is missing (in Colab). The
# functions are `impl_jax/sharded.py`'s, as the page shows them: edit one and
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
# JAX fixes its devices when it starts, on its first use: three CPU devices
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
    ) from started

# %%
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P

from impl_jax.arrays import FRAMEWORK
from impl_jax.attention import (
    at_least_float32, attend, causal_mask, finite_values, key_padding_mask,
    merge_heads, nan_where_nonfinite_attended, project, split_heads,
    unpack_biases,
)
from impl_jax.blockwise import online_softmax_step
from impl_jax.sharded import AXIS, empty_states, finish, row_specs
from shared.sharding import zigzag_positions
from shared.validation.sharded import (
    check_head_shards, check_sequence_shards, check_sharded,
)

# %%
def shard_sequence(x, key_padding=None, *, mesh):
    """x (..., T, C) as the rows of the mesh's N devices, in the zigzag layout.

    Args:
        key_padding: None, or what `key_padding_mask` takes: integer lengths
            (...,) or a bool keep array (..., T).
        mesh: from `make_mesh`.

    Returns:
        x (..., Tp, C) and a bool keep (..., Tp), False at padded keys and at
        the padding up to Tp: device r holds rows r * R to (r + 1) * R.
    """
    T = x.shape[-2]
    N = check_sequence_shards(T, mesh.size)
    # ring 1. cut the sequence into 2N chunks, two per device (zigzag)
    positions = zigzag_positions(T, N)  # (N, R), positions >= T are padding
    Tp = positions.size
    keep = jnp.ones(x.shape[:-1], dtype=bool)  # (..., T)
    if key_padding is not None:
        keep = key_padding_mask(key_padding, T)[..., 0, :]  # (..., T)
    x = jnp.concatenate([x, jnp.zeros_like(x[..., : Tp - T, :])], axis=-2)
    keep = jnp.concatenate([keep, jnp.zeros_like(keep[..., : Tp - T])], axis=-1)
    x, keep = x[..., positions.ravel(), :], keep[..., positions.ravel()]
    x_rows, keep_rows = row_specs(x.ndim)
    x = jax.device_put(x, NamedSharding(mesh, x_rows))  # (..., Tp, C)
    return x, jax.device_put(keep, NamedSharding(mesh, keep_rows))  # (..., Tp)

# %%
def ring_attention(
    x, w_q, w_k, w_v, w_o, n_heads, keep, *, scale=True, biases=None, mesh
):
    """Causal multi-head attention, the sequence split across N devices.

    Args:
        x, keep: (..., Tp, C) and (..., Tp), from `shard_sequence`.
        w_q, w_k, w_v, w_o, n_heads, scale, biases: as for `multi_head_attention`.
        mesh: the mesh of `shard_sequence`.

    Returns:
        (..., Tp, C), each device holding its rows of the output.
    """
    x_rows, keep_rows = row_specs(x.ndim)
    params = (w_q, w_k, w_v, w_o, biases)  # the same on every device
    on_device = functools.partial(
        ring_on_device, n_heads=n_heads, scale=scale, N=mesh.size
    )
    return jax.shard_map(
        on_device, mesh=mesh, in_specs=(x_rows, keep_rows, P()), out_specs=x_rows
    )(x, keep, params)

# %%
def ring_on_device(x, keep, params, *, n_heads, scale, N):
    """`ring_attention` on one device: x (..., R, C), keep (..., R)."""
    w_q, w_k, w_v, w_o, biases = params
    rank = lax.axis_index(AXIS)  # this device's place in the ring, traced
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
    k = at_least_float32(split_heads(k, n_heads))  # (..., H, R, D)
    v = at_least_float32(split_heads(v, n_heads))  # (..., H, R, D)
    # 4. scale by 1 / sqrt(D), once on the queries
    if scale:
        q = q * (1.0 / math.sqrt(q.shape[-1]))  # (..., H, R, D)
    states = empty_states(q)  # its two chunks' (m, l, acc)
    held = (k, v, keep)  # the block it holds
    for step in range(N):  # a Python loop: unrolled at trace time
        # ring 3. pass the key/value block on to the next device
        if step < N - 1:  # XLA may send it while this step computes
            incoming = pass_on(held, N)
        # ring 2. attend the queries held to the key/value block held
        states = ring_step(states, q, held, step, rank)
        if step < N - 1:
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
        causal = causal_mask(2 * c)  # (R, R)
        first = attend_block(
            first, q_first, k[..., :c, :], v[..., :c, :], causal[:c, :c] & keep[..., :c]
        )
        second = attend_block(second, q_second, k, v, causal[c:] & keep)
        return first, second

    def before(first, second):
        # j < rank: chunk j is before both, 2N - 1 - j after both
        first = attend_block(
            first, q_first, k[..., :c, :], v[..., :c, :], keep[..., :c]
        )
        second = attend_block(
            second, q_second, k[..., :c, :], v[..., :c, :], keep[..., :c]
        )
        return first, second

    def after(first, second):
        # j > rank: both after its first chunk, both before its second
        second = attend_block(second, q_second, k, v, keep)
        return first, second

    return lax.cond(step <= rank, before, after, first, second)  # rank is traced

# %%
def attend_block(state, q, k, v, allowed):
    """Keys and values (..., H, Bk, D) into the running (m, l, acc) of queries
    q (..., H, Bq, D); `allowed` (..., Bq, Bk) bool says who may attend whom."""
    state = online_softmax_step(state, q, k, finite_values(v), ~allowed)  # steps 3-7
    row_max, row_sum, acc = state
    acc = nan_where_nonfinite_attended(acc, v, allowed)  # NaN in, NaN out
    return row_max, row_sum, acc

# %%
def pass_on(held, N):
    """The block held, sent to device rank + 1; what arrives from rank - 1."""
    return lax.ppermute(held, AXIS, perm=[(r, (r + 1) % N) for r in range(N)])

# %%
def head_parallel_attention(
    x, w_q, w_k, w_v, w_o, n_heads, keep, *, scale=True, biases=None, mesh
):
    """Causal multi-head attention, the heads split across N devices.

    Args, Returns: as for `ring_attention`; N must divide n_heads. Under
    `jax.jit` (`head_parallel_attention_jit`), XLA partitions the program.
    """
    N = mesh.size
    dims = check_sharded(
        x, w_q, w_k, w_v, w_o, n_heads, keep, biases=biases, framework=FRAMEWORK
    )
    b_q, b_k, b_v, b_o = unpack_biases(biases)
    check_head_shards(dims.H, N)
    x_rows, _ = row_specs(x.ndim)
    by_rows = NamedSharding(mesh, x_rows)  # (..., Tp, C): R rows per device
    by_heads = NamedSharding(mesh, P(*x_rows[:-2], AXIS, None, None))  # (..., H, ...)
    everywhere = NamedSharding(mesh, P())
    # heads 1. gather every device's rows (all-gather)
    x_all = lax.with_sharding_constraint(x, everywhere)  # (..., Tp, C)
    keep_all = lax.with_sharding_constraint(keep, everywhere)  # (..., Tp)
    # causal is "position j <= position i", whatever order the rows are in
    positions = zigzag_positions(x_all.shape[-2], N).ravel()  # (Tp,)
    allowed = positions[None, :] <= positions[:, None]  # (Tp, Tp)
    allowed = allowed & keep_all[..., None, None, :]  # (..., 1, Tp, Tp)
    # this device's heads: columns of w_q, w_k, w_v and rows of w_o
    columns, rows = NamedSharding(mesh, P(None, AXIS)), NamedSharding(mesh, P(AXIS))
    w_q, w_k, w_v = (lax.with_sharding_constraint(w, columns) for w in (w_q, w_k, w_v))
    w_o = lax.with_sharding_constraint(w_o, rows)
    # 1. project x into queries, keys and values
    q = project(x_all, w_q, b_q)  # (..., Tp, C), C/N columns per device
    k = project(x_all, w_k, b_k)  # (..., Tp, C), C/N columns per device
    v = project(x_all, w_v, b_v)  # (..., Tp, C), C/N columns per device
    # 2. split heads (multi-head only)
    # (..., Tp, C) -> (..., H, Tp, D), H/N heads per device
    q = lax.with_sharding_constraint(split_heads(q, dims.H), by_heads)
    k = lax.with_sharding_constraint(split_heads(k, dims.H), by_heads)
    v = lax.with_sharding_constraint(split_heads(v, dims.H), by_heads)
    # heads 2. attend with this device's heads
    out, _ = attend(q, k, v, allowed, scale)  # steps 3 to 7
    # 7. (continued) merge heads, output projection
    out = merge_heads(out.astype(x.dtype))  # (..., Tp, C), C/N columns per device
    out = project(out, w_o)  # (..., Tp, C) @ (C, C): each device sums its rows
    # heads 3. sum the heads' outputs, each device keeping its rows (reduce-scatter)
    out = lax.with_sharding_constraint(out, by_rows)  # (..., Tp, C)
    return out if b_o is None else out + b_o

# %% [markdown]
# ## Against the float64 oracle, in float32

# %%
from impl_jax.arrays import from_numpy, to_numpy
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
from impl_jax.sharded import make_mesh, unshard_sequence

# the sequence of T = 6 cut over a mesh of N = 3 devices (the three CPU
# devices the cell above the imports asked for), zigzag: device r holds chunks
# r and 2N - 1 - r of 2N, so that each has as much of the causal triangle to
# compute; `shards` is one global array, each device holding its R = 2 rows
mesh = make_mesh(3)
shards, keep = shard_sequence(f32(x), mesh=mesh)  # (B, Tp, C), (B, Tp); Tp = 6
# traced once, compiled as one program;
# n_heads decides shapes, mesh decides the devices: static
jax.clear_caches()  # an edit above is traced anew
ring = jax.jit(ring_attention, static_argnames=("n_heads", "mesh"))
out = unshard_sequence(ring(shards, *map(f32, w), 2, keep, mesh=mesh), 6)
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
