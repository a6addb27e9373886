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
# # The build-up: from the average of the past to one head, in JAX
#
# Attention built up in seven stages, the lesson the sixth: chapter 0 of the page.
#
# Each stage takes the lesson's arguments and returns what each token
# receives, (T, D) (7: the last token's, (1, D)). Stages 1 to 3
# compute the same average three ways; 4 and 5 each add one idea; the lesson
# (6) is 5, line for line; 7 shows what attention cannot tell: the order of
# the earlier tokens. `triptych read` runs every stage on the trained
# model and shows its distance from the stage before and from the float64
# oracle (docs/teaching.md, "One lecture of two hours"). Shapes: T sequence,
# C model width, D head width.
#
# The first code cell installs the project where it is missing (in Colab). The
# functions are `impl_jax/buildup.py`'s, as the page shows them: edit one and
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

import jax
import jax.numpy as jnp
import numpy as np

from impl_jax import lesson

# %%
def average_loop(x, w_q, w_k, w_v):
    """1. Each token takes the average of the values up to it: a loop."""
    T, v = x.shape[-2], x @ w_v  # (T, C) @ (C, D) -> (T, D)
    total, rows = jnp.zeros_like(v[0]), []  # (D,)
    for i in range(T):
        total = total + v[i]  # v[0] + ... + v[i]
        rows.append(total / (i + 1))  # their average
    return jnp.stack(rows)  # (T, D)

# %%
def average_matmul(x, w_q, w_k, w_v):
    """2. The same average as one matmul: row i weighs keys 0..i by 1 / (i + 1)."""
    T, v = x.shape[-2], x @ w_v  # (T, C) @ (C, D) -> (T, D)
    causal = jnp.tril(jnp.ones((T, T), dtype=bool))  # (T, T)
    weights = causal.astype(v.dtype)  # 1 where key j <= query i, else 0
    weights = weights / weights.sum(axis=-1, keepdims=True)  # rows sum to 1
    return weights @ v  # (T, T) @ (T, D) -> (T, D)

# %%
def average_softmax(x, w_q, w_k, w_v):
    """3. The same weights from a softmax: score 0 for the past, -inf after."""
    T, v = x.shape[-2], x @ w_v  # (T, C) @ (C, D) -> (T, D)
    causal = jnp.tril(jnp.ones((T, T), dtype=bool))  # (T, T)
    scores = jnp.where(causal, 0.0, -jnp.inf).astype(v.dtype)  # (T, T)
    return softmax(scores) @ v  # exp(0) / (i + 1) on the past, exp(-inf) = 0

# %%
def dot_product(x, w_q, w_k, w_v):
    """4. Scores that depend on the data: how well query i matches key j."""
    T = x.shape[-2]
    q, k, v = x @ w_q, x @ w_k, x @ w_v  # (T, C) @ (C, D) -> (T, D)
    causal = jnp.tril(jnp.ones((T, T), dtype=bool))  # (T, T)
    scores = jnp.where(causal, q @ k.mT, -jnp.inf)  # (T, D) @ (D, T) -> (T, T)
    return softmax(scores) @ v  # (T, T) @ (T, D) -> (T, D)

# %%
def scaled(x, w_q, w_k, w_v):
    """5. The scores divided by sqrt(D): unit size at initialisation."""
    T, D = x.shape[-2], w_q.shape[-1]
    q, k, v = x @ w_q, x @ w_k, x @ w_v  # (T, C) @ (C, D) -> (T, D)
    causal = jnp.tril(jnp.ones((T, T), dtype=bool))  # (T, T)
    scores = jnp.where(causal, q @ k.mT / math.sqrt(D), -jnp.inf)  # (T, T)
    return softmax(scores) @ v  # (T, T) @ (T, D) -> (T, D)

# %%
def one_head(x, w_q, w_k, w_v):
    """6. One head of the lesson: stage 5 written as its seven steps."""
    out, _ = lesson.single_head_attention(x, w_q, w_k, w_v)  # and the weights
    return out  # (T, D)

# %%
def reversed_past(x, w_q, w_k, w_v):
    """7. Positions: the earlier tokens reversed, the last token kept, (1, D).
    Its output does not move: attention weighs a set of keys, and knows of
    order only what x carries (the model's position embedding)."""
    T = x.shape[-2]
    order = [*range(T - 2, -1, -1), T - 1]  # T - 2, ..., 1, 0, then T - 1
    out = one_head(x[jnp.asarray(order)], w_q, w_k, w_v)  # (T, D)
    return out[-1:]  # (1, D): the last token's, as in stage 6

# %%
def softmax(scores):
    """Each row: exp(score - row max) / its sum; masked scores give 0."""
    exp = jnp.exp(scores - scores.max(axis=-1, keepdims=True))  # (T, T)
    return exp / exp.sum(axis=-1, keepdims=True)  # (T, T)

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
x0 = x[0]  # one sequence (T, C): the stages take one
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


# traced once, compiled as one program
jax.clear_caches()  # an edit above is traced anew
stages = jax.jit(every_stage)
outs = stages(f32(x0), *map(f32, one))
for stage, out, expected in zip(STAGES, outs, ORACLES, strict=True):
    distance = np.abs(f64(out) - expected).max()
    print(f"{stage.__name__}: max |out - oracle| = {distance:.2e}")
    assert np.allclose(f64(out), expected, atol=ATOL, rtol=RTOL)

# %% [markdown]
# Try it: in `scaled` leave the scores undivided by sqrt(D), rerun: stage 5 is
# stage 4 again, misses the oracle of a head, which scales, and its assert stops
# the run there (stage 6, the lesson's head, has its own scale and would not
# move). Stages 1 to 3 are held to the oracle with every score 0 (w_q = w_k = 0):
# the average of the past.
