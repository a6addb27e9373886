"""The cells that run a chapter's functions in its notebook (notebooks/chapters.py
lists which chapter runs which), each a template that notebooks/build.py fills.

PROBLEM is the seeded problem every chapter shares (build.py keeps the lines
its run cell reads); a run cell runs the chapter's function on it in float32
and prints, and holds below float32's tolerance (shared/tolerances.py), the
distance of what it gives to the float64 oracle of shared/
(shared/reference.py). {framework} is the notebook's, {call} the function
(through the framework's compiler where it traces), {how} a comment line
saying which; doubled braces are the cell's own.
"""

from __future__ import annotations

PROBLEM = """from impl_{framework}.arrays import from_numpy, to_numpy
from shared.reference import reference_multi_head, reference_single_head
from shared.tolerances import tolerance


def f32(a):  # a NumPy array as the framework's float32 array
    return from_numpy(np.asarray(a), "float32")


def f64(a):  # back to NumPy, in float64
    return np.asarray(to_numpy(a), np.float64)


ATOL, RTOL = tolerance("float32")  # float32's tolerance (docs/suite.md)
rng = np.random.default_rng(0)
x = rng.standard_normal((2, 6, 8))  # (B, T, C)
w = [rng.standard_normal((8, 8)) / math.sqrt(8) for _ in range(4)]  # (C, C)
one = [a[:, :4] for a in w[:3]]  # w_q, w_k, w_v of one head of width D = 4"""

BACKWARD = """# the gradients of L = sum(out * d_out), d_out = dL/d out (B, T, D)
d_out = rng.standard_normal((2, 6, 4))
{how}
backward = {call}
grads = backward(f32(x), *map(f32, one), f32(d_out))


def loss(x, w_q, w_k, w_v):  # the float64 oracle's L
    return (reference_single_head(x, w_q, w_k, w_v)[0] * d_out).sum()


def finite_differences(inputs, step=1e-5):
    \"\"\"dL/d each entry of each input, by central differences of the oracle.\"\"\"
    found = []
    for a in inputs:
        grad = np.zeros_like(a)
        for i in np.ndindex(a.shape):
            keep = a[i]
            a[i] = keep + step
            up = loss(*inputs)
            a[i] = keep - step
            grad[i] = (up - loss(*inputs)) / (2 * step)
            a[i] = keep
        found.append(grad)
    return found


inputs = [x.copy(), *(a.copy() for a in one)]
names = ("x", "w_q", "w_k", "w_v")
for name, expected in zip(names, finite_differences(inputs)):
    distance = np.abs(f64(grads[name]) - expected).max()
    print(f"d_{{name}}: max |grad - oracle| = {{distance:.2e}}")
    assert np.allclose(f64(grads[name]), expected, atol=ATOL, rtol=RTOL)"""

BLOCKWISE = """# B in the shapes below is the batch of two sequences, not block_size
q, k, v = (f32(x @ a) for a in one)  # one head's (B, T, D), in float32
expected, _ = reference_single_head(x, *one)
{how}
attention = {call}
# blocks of 2: the last query block folds in three key blocks, rescaling
# what it summed when the max grows; 4 does not divide T = 6: a last block of 2
for block_size in (2, 4):
    out, _ = attention(q, k, v, block_size=block_size)
    distance = np.abs(f64(out) - expected).max()
    print(f"blocks of {{block_size}}: max |out - oracle| = {{distance:.2e}}")
    assert np.allclose(f64(out), expected, atol=ATOL, rtol=RTOL)"""

KV_CACHE = """cache = init_kv_cache((2,), 6, 8, 2)  # batch (2,), 6 slots, C = 8, H = 2
{how}
step = {call}
rows = []
for t in range(6):  # one token at a time, as a model generates
    out_t, cache = step(f32(x[:, t]), cache, *map(f32, w), 2)
    rows.append(f64(out_t))  # (B, C)
out = np.stack(rows, axis=-2)  # (B, T, C)
expected, _ = reference_multi_head(x, *w, 2)  # the full causal pass
distance = np.abs(out - expected).max()
print(f"token by token, two heads: max |out - oracle| = {{distance:.2e}}")
assert np.allclose(out, expected, atol=ATOL, rtol=RTOL)"""

BUILDUP = """x0 = x[0]  # one sequence (T, C): the stages take one
order = [4, 3, 2, 1, 0, 5]  # stage 7's: the earlier tokens reversed
zero = np.zeros_like(one[0])  # w_q = w_k = 0: every score 0, the plain average
average, _ = reference_single_head(x0, zero, zero, one[2])
unscaled, _ = reference_single_head(x0, *one, scale=False)
head, _ = reference_single_head(x0, *one)
last = reference_single_head(x0[order], *one)[0][-1:]  # (1, D)
STAGES = (average_loop, average_matmul, average_softmax, dot_product, scaled,
          one_head, reversed_past)
ORACLES = (average, average, average, unscaled, head, head, last)


def every_stage(x, w_q, w_k, w_v):  # each stage's output, in order
    return [stage(x, w_q, w_k, w_v) for stage in STAGES]


{how}
stages = {call}
outs = stages(f32(x0), *map(f32, one))
for stage, out, expected in zip(STAGES, outs, ORACLES, strict=True):
    distance = np.abs(f64(out) - expected).max()
    print(f"{{stage.__name__}}: max |out - oracle| = {{distance:.2e}}")
    assert np.allclose(f64(out), expected, atol=ATOL, rtol=RTOL)"""

FRAMEWORKS = """x0 = x[0]  # one sequence (T, C)
# the oracle of every head: one head at a time, on head h's columns (C, D)
columns = [slice(h * 4, (h + 1) * 4) for h in range(2)]
heads = np.stack([reference_single_head(x0, *(a[:, c] for a in w[:3]))[0]
                  for c in columns])  # (H, T, D)
{how}
over_heads = {call}
out, _ = over_heads(*map(f32, (x0, *w[:3])), 2)
distance = np.abs(f64(out) - heads).max()
print(f"every head at once: max |out - oracle| = {{distance:.2e}}")
assert np.allclose(f64(out), heads, atol=ATOL, rtol=RTOL)


def loss(w_q):  # the float64 oracle's L = out.sum(), one head
    return reference_single_head(x0, w_q, *one[1:])[0].sum()


step, expected = 1e-5, np.zeros_like(one[0])
for i in np.ndindex(expected.shape):  # central differences, entry by entry
    up, down = one[0].copy(), one[0].copy()
    up[i] += step
    down[i] -= step
    expected[i] = (loss(up) - loss(down)) / (2 * step)
grad = gradient(*map(f32, (x0, *one)))  # the framework's own way
distance = np.abs(f64(grad) - expected).max()
print(f"dL/dw_q: max |grad - oracle| = {{distance:.2e}}")
assert np.allclose(f64(grad), expected, atol=ATOL, rtol=RTOL)"""

ATTENTION = """# two heads, both sequences at once, under a key-padding mask: sequence 1
# padded on the left, its keys 0 and 1 hidden from every query and head, so
# that its queries 0 and 1, which may attend only keys 0 to i, attend nothing:
# rows of zeros, not 0 / 0 = NaN (the oracle's too)
keep = np.ones((2, 6), dtype=bool)  # (B, T): the keys that are tokens
keep[1, :2] = False
mask = keep[:, None, None, :]  # (B, 1, 1, T): the same for each head and query
{how}
attention = {call}
out, _ = attention(*map(f32, (x, *w)), 2, from_numpy(mask))
expected, _ = reference_multi_head(x, *w, 2, mask)
distance = np.abs(f64(out) - expected).max()
print(f"two heads, left-padded: max |out - oracle| = {{distance:.2e}}")
empty = np.abs(f64(out)[1, :2]).max()  # sequence 1's queries 0 and 1
print(f"rows with nothing to attend: max |out| = {{empty}}")
assert np.allclose(f64(out), expected, atol=ATOL, rtol=RTOL)"""

VARIANTS = """from impl_{framework}.attention import (
    allowed_keys, attend, merge_heads, project, split_heads,
)
from shared.variants import Rotary, Variant


def attention_with_variant(x, w_q, w_k, w_v, w_o, positions, n_heads, variant):
    \"\"\"attention.py's multi-head path (multi_head around attend_heads),
    calling the variant functions above, this notebook's: out (B, T, C).\"\"\"
    G = variant.groups(n_heads)  # query heads per KV head
    q = split_heads(project(x, w_q), n_heads)  # (B, H, T, D)
    k = split_heads(project(x, w_k), n_heads // G)  # (B, H_kv, T, D)
    v = split_heads(project(x, w_v), n_heads // G)  # (B, H_kv, T, D)
    q, k = normed_and_rotated(q, k, positions, variant)  # rotary positions
    k, v = repeat_kv(k, G), repeat_kv(v, G)  # (B, H, T, D): GQA
    # the keys each query reaches through the window; soft-cap and ALiBi
    reach, score_mod = variant_scores(variant, n_heads, positions, positions)
    allowed = allowed_keys(x.shape[-2]) & reach  # (T, T)
    out, _ = attend(q, k, v, allowed, True, score_mod)  # steps 3 to 7
    return project(merge_heads(out), w_o)  # (B, T, C)


# four query heads of width D = 2 share two KV heads (GQA: w_k and w_v are
# (C, H_kv * D)); q and k turned by rotary positions; each query reaches the
# 3 keys up to it (a sliding window); the scaled scores soft-capped at 2, then
# ALiBi's bias added
variant = Variant(
    n_kv_heads=2, rotary=Rotary(), window=3, softcap=2.0, alibi=True
)
w_kv = [a[:, :4] for a in w[1:3]]  # (C, H_kv * D)
positions = from_numpy(np.arange(6))  # (T,): the queries' and keys' positions
{how}
attention = {call}
out = attention(*map(f32, (x, w[0], *w_kv, w[3])), positions, 4, variant)
expected, _ = reference_multi_head(x, w[0], *w_kv, w[3], 4, variant=variant)
distance = np.abs(f64(out) - expected).max()
what = "GQA, rotary, window, soft-cap, ALiBi"
print(f"{{what}}: max |out - oracle| = {{distance:.2e}}")
assert np.allclose(f64(out), expected, atol=ATOL, rtol=RTOL)"""

MODULE = """# the module holding the four projections, copied from float32 NumPy arrays
module = CausalSelfAttention.from_weights(*(np.float32(a) for a in w), 2)


def forward(module, x):  # the module called
    return module(x)  # out (B, T, C), weights (B, H, T, T)


{how}
call = {call}
out, _ = call(module, f32(x))
expected, _ = reference_multi_head(x, *w, 2)
distance = np.abs(f64(out) - expected).max()
print(f"the module, two heads: max |out - oracle| = {{distance:.2e}}")
assert np.allclose(f64(out), expected, atol=ATOL, rtol=RTOL)"""

TRAINING_TASK = """from impl_numpy import train as by_hand
from shared.train import TrainConfig, make_task

# the task of shared/train.py, small: 8 tokens, sequences of 8 (a run of 2 to 4
# tokens said again), two layers of two heads over C = 8, a batch of 3
sizes = dict(vocab=8, seq_len=8, d_model=8, n_heads=2, batch=3)
config = TrainConfig(**sizes, steps=1)
task = make_task(config)  # float64 parameters: every backend starts from them
tokens = next(task.batches())  # (B, T) int64, the first batch"""

AGAINST_NUMPY = """# the float64 truth: NumPy's backward by hand, which the suite
# holds to central differences of every entry (tests/test_train.py)
expected = by_hand.gradients(task.params, tokens, 2)
expected_loss = by_hand.loss(task.params, tokens, 2)
print(f"the loss: |loss - float64's| = {{abs(f64(value) - expected_loss):.2e}}")
distances = [np.abs(f64(grads[n]) - expected[n]).max() for n in expected]
distance = max(distances)
print(f"every gradient: max |grad - float64's| = {{distance:.2e}}")
assert np.allclose(f64(value), expected_loss, atol=ATOL, rtol=RTOL)
for name in expected:
    found = f64(grads[name])
    assert np.allclose(found, expected[name], atol=ATOL, rtol=RTOL), name"""
"""The training notebooks' last lines: the loss `value` and the gradients
`grads` (by shared.train's names) against NumPy's in float64."""

TRAIN = f"""from impl_{{framework}}.train import as_tokens, init_params
{TRAINING_TASK}
params = init_params(task.params, "float32")
{{how}}
gradients_of = {{call}}
grads = gradients_of(params, as_tokens(tokens), 2)
value = loss(params, as_tokens(tokens), 2)
{AGAINST_NUMPY}"""

TRAIN_FLAX = f"""from impl_jax.train import as_tokens
{TRAINING_TASK}
model = AttentionOnlyLM(task.params, 2, "float32")  # the module holds them
# nnx.jit: traced once, compiled as one program, the module's state passed in;
# nnx.grad: the gradient for each nnx.Param, in a State shaped as the module
gradients_of = nnx.jit(nnx.grad(loss))
state = gradients_of(model, as_tokens(tokens))
value = loss(model, as_tokens(tokens))
# the gradients put in the module's places (a module holding gradients, not
# weights), read by shared.train's names, as NumPy's are
grads = nnx.merge(nnx.graphdef(model), state).params()
{AGAINST_NUMPY}"""

RING_AGAINST_ORACLE = """expected, _ = reference_multi_head(x, *w, 2)
distance = np.abs(f64(out) - expected).max()
print(f"{{what}}: max |out - oracle| = {{distance:.2e}}")
assert np.allclose(f64(out), expected, atol=ATOL, rtol=RTOL)"""
"""The ring notebooks' last lines: the output `out` (B, T, C), the words
`what`, against the oracle."""

SHARDED = f"""from impl_{{framework}}.sharded import unshard_sequence

# the sequence of T = 6 cut over N = 3 devices, zigzag: device r holds chunks
# r and 2N - 1 - r of 2N, so that each has as much of the causal triangle to
# compute; here a device is an item of a list (torch's notebook runs the same
# ring in processes over gloo, JAX's on a mesh of devices: docs/sharding.md)
shards, keep = shard_sequence(f32(x), n_devices=3)  # 3 x (B, 2, C), 3 x (B, 2)
{{how}}
ring = {{call}}
out = unshard_sequence(ring(shards, *map(f32, w), 2, keep), 6)  # (B, T, C)
what = "the ring over 3 devices, two heads"
{RING_AGAINST_ORACLE}"""

SHARDED_JAX = f"""from impl_jax.sharded import make_mesh, unshard_sequence

# the sequence of T = 6 cut over a mesh of N = 3 devices (the three CPU
# devices the cell above the imports asked for), zigzag: device r holds chunks
# r and 2N - 1 - r of 2N, so that each has as much of the causal triangle to
# compute; `shards` is one global array, each device holding its R = 2 rows
mesh = make_mesh(3)
shards, keep = shard_sequence(f32(x), mesh=mesh)  # (B, Tp, C), (B, Tp); Tp = 6
{{how}}
ring = {{call}}
out = unshard_sequence(ring(shards, *map(f32, w), 2, keep, mesh=mesh), 6)
what = "the ring over 3 devices, two heads"
{RING_AGAINST_ORACLE}"""

SHARDED_TORCH = f"""import datetime

import torch.multiprocessing as mp

from impl_torch.sharded import unshard_sequence


def device(rank, port, result):
    \"\"\"What each of the N = 3 processes runs: it joins the process group,
    takes its rows of the sequence of T = 6 (zigzag: chunks rank and
    2N - 1 - rank of 2N), runs the ring on them and gathers every device's
    rows; rank 0 writes the output into `result`, shared with this one.\"\"\"
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


{{how}}
ring = {{call}}
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
{RING_AGAINST_ORACLE}"""

KERNEL = """# B in the shapes below is the batch of two sequences, not block_size
q, k, v = (f32(x @ a) for a in one)  # one head's (B, T, D), float32
keep = from_numpy(np.ones((2, 6), dtype=bool))  # (B, T): every key kept
expected, _ = reference_single_head(x, *one)
{how}
launch = {call}
# blocks of 2: the last query block's program loops over three key blocks,
# rescaling what it summed when the max grows; 4 does not divide T = 6: the
# padded keys are never kept
for size in (2, 4):
    settings = (
        size,  # block_size: the rows of a query block, the keys of a key block
        True,  # causal
        1 / math.sqrt(4),  # the scale, 1 / sqrt(D)
        # interpret: INTERPRET_WORDS
        True,
        None,  # window: none
        None,  # softcap: none
    )
    out, _ = launch(q, k, v, keep, settings)
    distance = np.abs(f64(out) - expected).max()
    print(f"blocks of {{size}}: max |out - oracle| = {{distance:.2e}}")
    assert np.allclose(f64(out), expected, atol=ATOL, rtol=RTOL)"""

KERNEL_JAX = KERNEL.replace(
    "INTERPRET_WORDS",
    "Pallas's interpreter, the kernel as plain JAX on any\n"
    "        # machine (False compiles it: to Triton on a GPU)",
)
KERNEL_TORCH = KERNEL.replace(
    "INTERPRET_WORDS",
    "for flash_attention, which checks that Triton's\n"
    "        # interpreter made the kernels (the cell before the imports);\n"
    "        # flash_forward ignores it",
)
