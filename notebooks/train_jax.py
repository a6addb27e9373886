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
# # train.py: one training step, in JAX
#
# Training a tiny attention-only language model in JAX: jax.value_and_grad
# and optax.adam (docs/train.md); the flax nnx form is in train_flax.py.
#
# The model (shared/train.py): token and position embeddings, L layers of our
# multi_head_attention added to the residual stream, an unembedding, the
# cross-entropy of every next token. impl_numpy/ and impl_torch/ hold the same
# file, by hand and with autograd; the training step reads the same in all three.
# Shapes: B batch, T sequence, C = d_model, H heads, V vocabulary.
#
# The first code cell installs the project where it is missing (in Colab). The
# functions are `impl_jax/train.py`'s, as the page shows them: edit one and rerun
# the cells below it.

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
import jax
import numpy as np
import optax

from impl_jax.attention import multi_head_attention
from impl_jax.train import layer_weights, n_layers

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
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()

# %%
def loss(params, tokens, n_heads):
    """The model's loss on a batch of tokens (B, T): a scalar."""
    # [1] forward: embed, L attention layers on the residual stream, unembed
    logits, _ = forward(params, tokens, n_heads)
    # [2] loss: cross-entropy of every next token
    return cross_entropy(logits, tokens)

# %%
def train_step(params, adam, tokens, n_heads, optimizer):
    """One step of training; returns the new params, the new Adam state and
    the loss (JAX's arrays never change: each step makes new ones)."""
    # [3] backward: the gradient of the loss for every parameter
    value, grads = jax.value_and_grad(loss)(params, tokens, n_heads)
    # [4] Adam: step every parameter by its gradient's running moments
    updates, adam = optimizer.update(grads, adam, params)
    return optax.apply_updates(params, updates), adam, value

# %%
def gradients(params, tokens, n_heads):
    """The gradient of `loss` for every parameter, by jax.grad (train_step's
    backward)."""
    return jax.grad(loss)(params, tokens, n_heads)

# %%
def make_optimizer(params, lr, b1, b2, eps):
    """optax.adam, a pair of pure functions (init, update), and the state that
    its init made (m, v and the step count): the state is data, apart."""
    optimizer = optax.adam(lr, b1=b1, b2=b2, eps=eps)
    return optimizer, optimizer.init(params)

# %%
def compile_train_step():
    """jax.jit of train_step: the whole step, backward and Adam, one program."""
    return jax.jit(train_step, static_argnames=("n_heads", "optimizer"))

# %% [markdown]
# Not in JAX's train.py: `adam_step` (NumPy's). No such lines here: autodiff, the
# optimizer's library or the compiler does this, or (NumPy) there is nothing to
# compile.

# %% [markdown]
# ## Against the float64 oracle, in float32

# %%
from impl_jax.arrays import to_numpy
from shared.tolerances import tolerance


def f64(a):  # back to NumPy, in float64
    return np.asarray(to_numpy(a), np.float64)


ATOL, RTOL = tolerance("float32")  # float32's tolerance (docs/suite.md)

# %%
from impl_jax.train import as_tokens, init_params
from impl_numpy import train as by_hand
from shared.train import TrainConfig, make_task

# the task of shared/train.py, small: 8 tokens, sequences of 8 (a run of 2 to 4
# tokens said again), two layers of two heads over C = 8, a batch of 3
sizes = dict(vocab=8, seq_len=8, d_model=8, n_heads=2, batch=3)
config = TrainConfig(**sizes, steps=1)
task = make_task(config)  # float64 parameters: every backend starts from them
tokens = next(task.batches())  # (B, T) int64, the first batch
params = init_params(task.params, "float32")
# traced once, compiled as one program; n_heads decides shapes: static
jax.clear_caches()  # an edit above is traced anew
gradients_of = jax.jit(gradients, static_argnames="n_heads")
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
