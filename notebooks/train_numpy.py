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
# # train.py: one training step, in NumPy
#
# Training a tiny attention-only language model in NumPy: every gradient and
# Adam by hand (the derivations: docs/train.md).
#
# The model (shared/train.py): token and position embeddings, L layers of our
# multi_head_attention added to the residual stream, an unembedding, the
# cross-entropy of every next token. impl_torch/ and impl_jax/ hold the same
# file with autodiff and their optimizers (torch.optim, optax); the training
# step reads the same in all three.
# Shapes: B batch, T sequence, C = d_model, H heads, V vocabulary.
#
# The first code cell installs the project where it is missing (in Colab). The
# functions are `impl_numpy/train.py`'s, as the page shows them: edit one and
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
import numpy as np

from impl_numpy.attention import multi_head_attention
from impl_numpy.backward import (
    multi_head_attention_backward, sum_over_positions,
)
from impl_numpy.train import layer_weights, n_layers
from shared.train import LAYER_WEIGHTS

# %%
def forward(params, tokens, n_heads):
    """tokens (B, T) -> logits (B, T, V), the weights of each layer (B, H, T, T)."""
    T = tokens.shape[-1]
    x = params["embed"][tokens] + params["pos"][:T]  # (B, T) -> (B, T, C)
    weights = []
    for layer in range(n_layers(params)):
        out, w = multi_head_attention(x, *layer_weights(params, layer), n_heads)
        x = x + out  # the residual stream: each layer adds to it
        weights.append(w)
    logits = x @ params["unembed"]  # (B, T, C) @ (C, V) -> (B, T, V)
    return logits, weights

# %%
def cross_entropy(logits, tokens):
    """Mean -log p(next token) over the B·(T-1) predictions."""
    logits, targets = logits[:, :-1], tokens[:, 1:]  # position t predicts t + 1
    top = logits.max(axis=-1, keepdims=True)  # (B, T-1, 1): exp cannot overflow
    log_z = top[..., 0] + np.log(np.exp(logits - top).sum(axis=-1))  # (B, T-1)
    picked = np.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return (log_z - picked).mean()

# %%
def loss(params, tokens, n_heads):
    """The model's loss on a batch of tokens (B, T): a scalar."""
    # [1] forward: embed, L attention layers on the residual stream, unembed
    logits, _ = forward(params, tokens, n_heads)
    # [2] loss: cross-entropy of every next token
    return cross_entropy(logits, tokens)

# %%
def train_step(params, adam, tokens, n_heads):
    """One step of training, in place on `params` and `adam`; returns the loss."""
    value = loss(params, tokens, n_heads)
    # [3] backward: the gradient of the loss for every parameter
    grads = gradients(params, tokens, n_heads)
    # [4] Adam: step every parameter by its gradient's running moments
    adam_step(params, grads, adam)
    return value

# %%
def gradients(params, tokens, n_heads):
    """The gradient of `loss` for every parameter, by hand: the forward in
    reverse (docs/train.md#the-backward-by-hand)."""
    B, T = tokens.shape
    # forward again, keeping the residual stream that enters each layer
    x = params["embed"][tokens] + params["pos"][:T]  # (B, T, C)
    stream = []
    for layer in range(n_layers(params)):
        stream.append(x)
        x = x + multi_head_attention(x, *layer_weights(params, layer), n_heads)[0]
    logits = x @ params["unembed"]  # (B, T, C) @ (C, V) -> (B, T, V)
    # loss: d logits = (softmax - one hot of the next token) / (B·(T-1)),
    # and 0 at the last position, which predicts nothing
    p = np.exp(logits - logits.max(axis=-1, keepdims=True))  # (B, T, V)
    d_logits = p / p.sum(axis=-1, keepdims=True)  # softmax
    rows, cols = np.indices((B, T - 1))
    d_logits[rows, cols, tokens[:, 1:]] -= 1.0
    d_logits[:, -1] = 0.0
    d_logits /= B * (T - 1)
    # unembed: logits = x @ W_U
    grads = {"unembed": sum_over_positions(x, d_logits)}  # (C, V)
    d_x = d_logits @ params["unembed"].T  # (B, T, V) @ (V, C) -> (B, T, C)
    # each layer, last first: x + out(x) passes d_x on and adds out's d_x
    for layer in reversed(range(n_layers(params))):
        w = layer_weights(params, layer)
        g = multi_head_attention_backward(stream[layer], *w, n_heads, d_x)
        for name in LAYER_WEIGHTS:
            grads[f"layer{layer}.{name}"] = g[name]
        d_x = d_x + g["x"]  # (B, T, C)
    # embed: each token's row collects d_x wherever it occurs; pos over the batch
    grads["embed"] = np.zeros_like(params["embed"])
    np.add.at(grads["embed"], tokens, d_x)  # (V, C)
    grads["pos"] = np.zeros_like(params["pos"])
    grads["pos"][:T] = d_x.sum(axis=0)  # (T, C)
    return grads

# %%
def make_optimizer(params, lr, b1, b2, eps):
    """Adam's state: zero moments m, v per parameter, the step count, settings."""
    zeros = {name: np.zeros_like(w) for name, w in params.items()}
    moments = {"m": zeros, "v": {name: w.copy() for name, w in zeros.items()}}
    return {**moments, "t": 0, "lr": lr, "b1": b1, "b2": b2, "eps": eps}

# %%
def adam_step(params, grads, adam):
    """Adam (Kingma and Ba, 2015, Algorithm 1), in place on params and adam."""
    adam["t"] += 1
    lr, b1, b2, eps, t = (adam[k] for k in ("lr", "b1", "b2", "eps", "t"))
    for name, g in grads.items():
        m = adam["m"][name] = b1 * adam["m"][name] + (1 - b1) * g  # mean of g
        v = adam["v"][name] = b2 * adam["v"][name] + (1 - b2) * g * g  # of g²
        m_hat, v_hat = m / (1 - b1**t), v / (1 - b2**t)  # unbiased from 0
        params[name] -= lr * m_hat / (np.sqrt(v_hat) + eps)

# %% [markdown]
# Not in NumPy's train.py: `compile_train_step` (PyTorch's and JAX's). No such
# lines here: autodiff, the optimizer's library or the compiler does this, or
# (NumPy) there is nothing to compile.

# %% [markdown]
# ## Against the float64 oracle, in float32

# %%
from impl_numpy.arrays import to_numpy
from shared.tolerances import tolerance


def f64(a):  # back to NumPy, in float64
    return np.asarray(to_numpy(a), np.float64)


ATOL, RTOL = tolerance("float32")  # float32's tolerance (docs/suite.md)

# %%
from impl_numpy.train import as_tokens, init_params
from impl_numpy import train as by_hand
from shared.train import TrainConfig, make_task

# the task of shared/train.py, small: 8 tokens, sequences of 8 (a run of 2 to 4
# tokens said again), two layers of two heads over C = 8, a batch of 3
sizes = dict(vocab=8, seq_len=8, d_model=8, n_heads=2, batch=3)
config = TrainConfig(**sizes, steps=1)
task = make_task(config)  # float64 parameters: every backend starts from them
tokens = next(task.batches())  # (B, T) int64, the first batch
params = init_params(task.params, "float32")
# run as written, one operation at a time
gradients_of = gradients
grads = gradients_of(params, as_tokens(tokens), 2)
value = loss(params, as_tokens(tokens), 2)
# the float64 truth: NumPy's backward by hand, which the suite
# holds to central differences of every entry (tests/test_train.py)
expected = by_hand.gradients(task.params, tokens, 2)
expected_loss = by_hand.loss(task.params, tokens, 2)
print(f"the loss: |loss - float64's| = {abs(f64(value) - expected_loss):.2e}")
distances = [np.abs(f64(grads[n]) - expected[n]).max() for n in expected]
distance = max(distances)
print(f"every gradient: max |grad - float64's| = {distance:.2e}")
assert np.allclose(f64(value), expected_loss, atol=ATOL, rtol=RTOL)
for name in expected:
    found = f64(grads[name])
    assert np.allclose(found, expected[name], atol=ATOL, rtol=RTOL), name

# %% [markdown]
# Try it: in `cross_entropy` write `tokens[:, :-1]` for `tokens[:, 1:]`, so that
# each position is asked for itself, not the next token; rerun: the loss leaves
# float64's. In torch and JAX the gradients follow it, for autodiff
# differentiates the loss as written; in NumPy they stay float64's, for
# `gradients` writes the backward by hand and never calls `cross_entropy`: a
# hand-written backward must be kept in step with the forward by hand. This
# notebook checks the gradients, where the frameworks differ most; `train_step`
# and Adam, shown above, are what `triptych train` runs, step for step alike in
# the three.
