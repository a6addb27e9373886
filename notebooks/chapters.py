"""The notebooks notebooks/build.py makes: one per chapter of the page and
framework, in the page's reading order (triptych/read/chapters.py).

Each chapter notebook holds the chapter's functions as the page shows them
(read from impl_<framework>/<file>.py), then PROBLEM, a seeded problem, and
its RUNS cell: the chapter's function run on it in float32, and the distance
of what it gives to the float64 oracle of shared/ (shared/reference.py),
printed and held below float32's tolerance (shared/tolerances.py). A RUNS
cell is a template: {call} is the function (through the framework's
compiler where it traces), {how} a comment line saying which. A run cell may
define the function it runs, calling the chapter's functions shown above it
as the library calls them (buildup, variants, module): tests/test_notebooks.py's
LIBRARY names the library's function that its lines are held to.

To add a chapter (one of triptych/read/chapters.py's PAGE): its slug, RUNS cell
and CLOSING words here, its expected lines in tests/test_notebooks.py, then
`python notebooks/build.py`; the test runs every notebook and compares what
it prints with the library's distance on the same problem.
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
for name, expected in zip(("x", "w_q", "w_k", "w_v"), finite_differences(inputs)):
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
mask = keep[:, None, None, :]  # (B, 1, 1, T): the same for every head and query
{how}
attention = {call}
out, _ = attention(*map(f32, (x, *w)), 2, from_numpy(mask))
expected, _ = reference_multi_head(x, *w, 2, mask)
distance = np.abs(f64(out) - expected).max()
print(f"two heads, left-padded: max |out - oracle| = {{distance:.2e}}")
print(f"rows with nothing to attend: max |out| = {{np.abs(f64(out)[1, :2]).max()}}")
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
variant = Variant(n_kv_heads=2, rotary=Rotary(), window=3, softcap=2.0, alibi=True)
w_kv = [a[:, :4] for a in w[1:3]]  # (C, H_kv * D)
positions = from_numpy(np.arange(6))  # (T,): the queries' and keys' positions
{how}
attention = {call}
out = attention(*map(f32, (x, w[0], *w_kv, w[3])), positions, 4, variant)
expected, _ = reference_multi_head(x, w[0], *w_kv, w[3], 4, variant=variant)
distance = np.abs(f64(out) - expected).max()
print(f"GQA, rotary, window, soft-cap, ALiBi: max |out - oracle| = {{distance:.2e}}")
assert np.allclose(f64(out), expected, atol=ATOL, rtol=RTOL)"""

MODULE = """# the module holding the four projections, copied from float32 NumPy arrays
module = CausalSelfAttention.from_weights(*(np.float32(a) for a in w), 2)


def forward(module, x):  # the module called: out (B, T, C), weights (B, H, T, T)
    return module(x)


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
config = TrainConfig(vocab=8, seq_len=8, d_model=8, n_heads=2, batch=3, steps=1)
task = make_task(config)  # float64 parameters: every backend starts from them
tokens = next(task.batches())  # (B, T) int64, the first batch"""

AGAINST_NUMPY = """# the float64 truth: NumPy's backward by hand, which the suite
# holds to central differences of every entry (tests/test_train.py)
expected = by_hand.gradients(task.params, tokens, 2)
expected_loss = by_hand.loss(task.params, tokens, 2)
print(f"the loss: |loss - float64's| = {{abs(f64(value) - expected_loss):.2e}}")
distance = max(np.abs(f64(grads[name]) - expected[name]).max() for name in expected)
print(f"every gradient: max |grad - float64's| = {{distance:.2e}}")
assert np.allclose(f64(value), expected_loss, atol=ATOL, rtol=RTOL)
for name in expected:
    assert np.allclose(f64(grads[name]), expected[name], atol=ATOL, rtol=RTOL), name"""
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

SHARDED = """from impl_{framework}.sharded import unshard_sequence

# the sequence of T = 6 cut over N = 3 devices, zigzag: device r holds chunks r
# and 2N - 1 - r of 2N, so that each has as much of the causal triangle to
# compute; here a device is an item of a list (torch's ranks over gloo and JAX's
# device mesh run the same ring: `triptych shard`, docs/sharding.md)
shards, keep = shard_sequence(f32(x), n_devices=3)  # 3 x (B, 2, C), 3 x (B, 2)
{how}
ring = {call}
out = unshard_sequence(ring(shards, *map(f32, w), 2, keep), 6)  # (B, T, C)
expected, _ = reference_multi_head(x, *w, 2)
distance = np.abs(f64(out) - expected).max()
print(f"the ring over 3 devices, two heads: max |out - oracle| = {{distance:.2e}}")
assert np.allclose(f64(out), expected, atol=ATOL, rtol=RTOL)"""

KERNEL = """# B in the shapes below is the batch of two sequences, not block_size
q, k, v = (f32(x @ a) for a in one)  # one head's (B, T, D), float32
keep = jnp.ones(q.shape[:-1], dtype=bool)  # (B, T): every key kept
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
        True,  # interpret: Pallas's interpreter, the kernel as plain JAX on any
        # machine (False compiles it: to Triton on a GPU)
        None,  # window: none
        None,  # softcap: none
    )
    out, _ = launch(q, k, v, keep, settings)
    distance = np.abs(f64(out) - expected).max()
    print(f"blocks of {{size}}: max |out - oracle| = {{distance:.2e}}")
    assert np.allclose(f64(out), expected, atol=ATOL, rtol=RTOL)"""

RUNS = {  # chapter slug: the cell that runs it, the function it calls, its
    # arguments that decide shapes (static where a framework traces: jax.jit)
    "buildup": (BUILDUP, "every_stage", ()),
    "frameworks": (FRAMEWORKS, "every_head", ("n_heads",)),
    "attention": (ATTENTION, "multi_head_attention", ("n_heads",)),
    "backward": (BACKWARD, "single_head_attention_backward", ()),
    "blockwise": (BLOCKWISE, "blockwise_attention", ("block_size",)),
    "kv_cache": (KV_CACHE, "decode_step", ("n_heads",)),
    "variants": (VARIANTS, "attention_with_variant", ("n_heads",)),
    "module": (MODULE, "forward", ()),
    "sharded": (SHARDED, "ring_attention", ("n_heads",)),
    "train": (TRAIN, "gradients", ("n_heads",)),
    "train_flax": (TRAIN_FLAX, "loss", ()),
    "kernel": (KERNEL, "flash_forward", ("settings",)),
}
"""The chapters with a notebook, besides the lesson (which needs nothing of
the project: notebooks/build.py writes its oracle out in plain loops). A
framework whose compiler traces (shared/registry.py: JAX's jax.jit) runs the
function through it, as its users do: once traced, one program compiled,
rather than each operation compiled on its first use."""
ONLY = {"kernel": ("jax",), "sharded": ("numpy",), "train_flax": ("jax",)}
"""The chapters with a notebook in some frameworks only: the kernel in JAX,
whose Pallas interpreter runs it on any machine (NumPy has no kernel; torch's
Triton needs a GPU, or its interpreter, which TRITON_INTERPRET=1 turns on
before Triton is first imported: not a notebook's to set); the ring in NumPy,
whose devices are the items of a list (torch's needs a process group, JAX's a
mesh of devices, which `triptych shard` starts); flax's training step (the
page's NumPy and PyTorch columns show train.py, whose notebooks are the train
chapter's)."""
SHOWN_TOO = {
    "kernel": (
        ("flash_forward",),
        "`flash_forward`, last, is not on the page: it launches the kernel above "
        "it, the notebook's own.",
    )
}
"""The functions a notebook shows besides the page's, and its words on them:
the kernel's launcher, so that the kernel it launches, and the step that
calls, are the notebook's own (edit one, rerun, and the launch runs the edit)."""

CLOSING = {
    "buildup": "Try it: in `scaled` leave the scores undivided by sqrt(D), "
    "rerun: stage 5 is stage 4 again, misses the oracle of a head, which "
    "scales, and its assert stops the run there (stage 6, the lesson's head, "
    "has its own scale and would not move). Stages 1 to 3 are held "
    "to the oracle with every score 0 (w_q = w_k = 0): the average of the past.",
    "frameworks": "Try it: in `heads_of` reshape to (H, C, D) at once, "
    "without the swap, rerun: a head gets a slab of rows of the (C, C) "
    "weight, not its own columns, and every head misses the oracle. The "
    "functions of one framework only (`trace`, `compiled`, `as_layer`) are "
    'the page\'s: docs/reading.md, "What each framework adds".',
    "attention": "Try it: in `softmax_or_zeros` divide by `row_sum` as it is "
    "(drop the `where`), rerun: the rows with nothing to attend become "
    "0 / 0 = NaN, and NaN is near nothing, the oracle's zeros least of all. "
    "docs/contract.md says what each helper promises.",
    "backward": "Try it (NumPy): in `attend_backward` drop the softmax's "
    "second term, the row sum, rerun, and the distance grows. In torch and JAX "
    "the backward is autodiff's, the tape's or the trace's, with no line of "
    "its own to break: set it beside NumPy's by hand. Exercise 5 "
    "(exercises/README.md) asks for the backward by hand.",
    "blockwise": "Try it: in `online_softmax_step` leave `acc` unscaled when "
    "the max grows (drop the `rescale`), rerun, and blocks of 2 miss the "
    "oracle. "
    "Exercise 4 (exercises/README.md) asks for this step.",
    "variants": "Try it: in `window_mask` write `>=` for `>`, rerun: each "
    "query reaches W + 1 keys, one more than the oracle's W. Sinks and "
    "QK-norm, and the functions for blockwise attention and the rolling "
    "cache, are run by the library's attention, blockwise.py and kv_cache.py; "
    "docs/variants.md says what each variant is.",
    "module": "Try it: in `projections` swap the first two, the keys' "
    "weights where the queries' belong, rerun: each score becomes k_i . q_j, "
    "not q_i . k_j, and the distance grows. The module computes nothing of "
    "its own: its call is attention.py's multi_head_attention on the weights "
    "it holds (docs/contract.md, Module forms).",
    "kv_cache": "Try it: attend every slot, not only the filled ones (the "
    "`filled` mask), rerun: the early tokens see empty slots. Exercise 6 "
    "(exercises/README.md) asks for one step.",
    "kernel": "Try it: in `online_softmax_step` leave `acc` unscaled when the "
    "max grows (write `acc = acc` for `acc = acc * rescale[:, None]`), rerun: "
    "blocks of 2 miss the oracle. The kernel is the blockwise chapter's online "
    "softmax, one program per (batch x head, query block), its m, l and acc "
    "kept on chip; `flash_forward` launches it. docs/kernels.md maps each "
    "line to blockwise.py, and runs it compiled on a GPU.",
    "sharded": "Try it: in `ring_step` write `step < rank` for `step <= "
    "rank`, rerun: at step r device r holds device 0's block, chunks 0 and "
    "2N - 1, and now attends it as if both came after its first chunk; its "
    "first chunk misses the keys of chunk 0 and the distance grows.",
    "train": "Try it: in `cross_entropy` write `tokens[:, :-1]` for "
    "`tokens[:, 1:]`, so that each position is asked for itself, not the "
    "next token; rerun: the loss leaves float64's. In torch and JAX the "
    "gradients follow it, for autodiff differentiates the loss as written; in "
    "NumPy they stay float64's, for `gradients` writes the backward by hand and "
    "never calls `cross_entropy`: a hand-written backward must be kept in step "
    "with the forward by hand. This notebook checks the gradients, where the "
    "frameworks differ most; `train_step` and Adam, shown above, are what "
    "`triptych train` runs, step for step alike in the three.",
    "train_flax": "Try it: in `__call__` write `x = out` for `x = x + out`, "
    "rerun: without the residual stream each layer sees only the one before "
    "it, the embeddings reach the unembedding only through the attention, "
    "and neither the loss nor the gradients are NumPy's any more.",
}

NOTEBOOK_WORDS = {
    "see the other columns' comments": "their files say how, in comments",
    "the chapter's words say why": "the page that `triptych read` writes says "
    "why, in this chapter",
}
"""The words of a chapter's `absent` (triptych/read/chapters.py) that point at
the page's columns, as a notebook, which has one framework, says them."""
