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
# # train_flax.py: the training step in flax, in JAX
#
# The same model as an nnx.Module, trained with nnx.Optimizer (docs/train.md).
#
# impl_jax/train.py passes the parameters around as a dict; flax keeps them in
# the module, as nnx.Embed, nnx.Param, our CausalSelfAttention (module.py) per
# layer and nnx.Linear, and nnx.Optimizer updates them in place. The training
# step reads as in train.py. Shapes: B batch, T sequence, C = d_model, V vocab.
#
# The first code cell installs the project where it is missing (in Colab). The
# functions are `impl_jax/train_flax.py`'s, as the page shows them: edit one and
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
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from impl_jax.arrays import require_x64_for
from impl_jax.module import CausalSelfAttention
from impl_jax.train import cross_entropy, layer_weights, n_layers
from shared.train import LAYER_WEIGHTS

# %%
class AttentionOnlyLM(nnx.Module):
    """Token and position embeddings, L attention layers on the residual
    stream, an unembedding: tokens (B, T) -> logits (B, T, V)."""

    def __init__(self, params, n_heads, dtype):
        """The shared float64 parameters (shared.train.make_task) as `dtype`."""
        require_x64_for(dtype)  # float64 needs x64 (docs/contract.md)
        embed, unembed = params["embed"], params["unembed"]
        rngs = nnx.Rngs(0)  # every weight is overwritten below
        self.embed = nnx.Embed(*embed.shape, param_dtype=dtype, rngs=rngs)
        self.embed.embedding[...] = jnp.asarray(embed, dtype)
        self.pos = nnx.Param(jnp.asarray(params["pos"], dtype))
        self.layers = nnx.List(
            CausalSelfAttention.from_weights(
                *(w.astype(dtype) for w in layer_weights(params, layer)), n_heads
            )
            for layer in range(n_layers(params))
        )
        self.unembed = nnx.Linear(
            *unembed.shape, use_bias=False, param_dtype=dtype, rngs=rngs
        )
        self.unembed.kernel[...] = jnp.asarray(unembed, dtype)  # (C, V): (in, out)

    def __call__(self, tokens):
        """tokens (B, T) -> logits (B, T, V), the weights of each layer."""
        T = tokens.shape[-1]
        x = self.embed(tokens) + self.pos[:T]  # (B, T) -> (B, T, C)
        weights = []
        for layer in self.layers:
            out, w = layer(x)
            x = x + out  # the residual stream: each layer adds to it
            weights.append(w)
        return self.unembed(x), weights  # (B, T, C) @ (C, V) -> (B, T, V)

    def params(self):
        """The parameters by the names of shared.train (NumPy-ready arrays)."""
        found = {"embed": self.embed.embedding[...], "pos": self.pos[...]}
        for index, layer in enumerate(self.layers):
            names = (f"layer{index}.{w}" for w in LAYER_WEIGHTS)
            found.update(zip(names, layer.projections(), strict=True))
        return {**found, "unembed": self.unembed.kernel[...]}

# %%
def loss(model, tokens):
    """The model's loss on a batch of tokens (B, T): a scalar."""
    # [1] forward: embed, L attention layers on the residual stream, unembed
    logits, _ = model(tokens)
    # [2] loss: cross-entropy of every next token
    return cross_entropy(logits, tokens)

# %%
def train_step(model, adam, tokens):
    """One step of training, in place on `model` and `adam`; returns the loss."""
    # [3] backward: the gradient of the loss for every parameter
    value, grads = nnx.value_and_grad(loss)(model, tokens)
    # [4] Adam: step every parameter by its gradient's running moments
    adam.update(model, grads)
    return value

# %%
def make_optimizer(model, lr, b1, b2, eps):
    """nnx.Optimizer: optax.adam and its state, kept beside the model."""
    return nnx.Optimizer(model, optax.adam(lr, b1=b1, b2=b2, eps=eps), wrt=nnx.Param)

# %%
def compile_train_step():
    """nnx.jit of train_step: the module's state in and out of one program."""
    return nnx.jit(train_step)

# %% [markdown]
# ## Against the float64 oracle, in float32

# %%
from impl_jax.arrays import to_numpy
from shared.tolerances import tolerance


def f64(a):  # back to NumPy, in float64
    return np.asarray(to_numpy(a), np.float64)


ATOL, RTOL = tolerance("float32")  # float32's tolerance (docs/suite.md)

# %%
from impl_jax.train import as_tokens
from impl_numpy import train as by_hand
from shared.train import TrainConfig, make_task

# the task of shared/train.py, small: 8 tokens, sequences of 8 (a run of 2 to 4
# tokens said again), two layers of two heads over C = 8, a batch of 3
sizes = dict(vocab=8, seq_len=8, d_model=8, n_heads=2, batch=3)
config = TrainConfig(**sizes, steps=1)
task = make_task(config)  # float64 parameters: every backend starts from them
tokens = next(task.batches())  # (B, T) int64, the first batch
model = AttentionOnlyLM(task.params, 2, "float32")  # the module holds them
# nnx.jit: traced once, compiled as one program, the module's state passed in;
# nnx.grad: the gradient for each nnx.Param, in a State shaped as the module
gradients_of = nnx.jit(nnx.grad(loss))
state = gradients_of(model, as_tokens(tokens))
value = loss(model, as_tokens(tokens))
# the gradients put in the module's places (a module holding gradients, not
# weights), read by shared.train's names, as NumPy's are
grads = nnx.merge(nnx.graphdef(model), state).params()
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
# Try it: in `__call__` write `x = out` for `x = x + out`, rerun: without the
# residual stream each layer sees only the one before it, the embeddings reach
# the unembedding only through the attention, and neither the loss nor the
# gradients are NumPy's any more.
