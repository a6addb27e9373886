"""Training a tiny attention-only language model in JAX: jax.value_and_grad
and optax.adam (docs/train.md); the flax nnx form is in train_flax.py.

The model (shared/train.py): token and position embeddings, L layers of our
multi_head_attention added to the residual stream, an unembedding, the
cross-entropy of every next token. impl_numpy/ and impl_torch/ hold the same
file, by hand and with autograd; the training step reads the same in all three.
Shapes: B batch, T sequence, C = d_model, H heads, V vocabulary.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from impl_jax.arrays import from_numpy
from impl_jax.attention import multi_head_attention
from shared.train import LAYER_WEIGHTS


def init_params(params, dtype):
    """The shared float64 parameters as JAX arrays of `dtype` (a pytree)."""
    return {name: from_numpy(w, dtype) for name, w in params.items()}


def layer_weights(params, layer):
    """w_q, w_k, w_v, w_o (C, C) of one layer."""
    return tuple(params[f"layer{layer}.{w}"] for w in LAYER_WEIGHTS)


def n_layers(params):
    """L, read from the parameters' names."""
    return sum(name.endswith(".w_q") for name in params)


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


def cross_entropy(logits, tokens):
    """Mean -log p(next token) over the B·(T-1) predictions."""
    logits, targets = logits[:, :-1], tokens[:, 1:]  # position t predicts t + 1
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


def loss(params, tokens, n_heads):
    """The model's loss on a batch of tokens (B, T): a scalar."""
    # [1] forward: embed, L attention layers on the residual stream, unembed
    logits, _ = forward(params, tokens, n_heads)
    # [2] loss: cross-entropy of every next token
    return cross_entropy(logits, tokens)


def train_step(params, adam, tokens, n_heads, optimizer):
    """One step of training; returns the new params, the new Adam state and
    the loss (JAX's arrays never change: each step makes new ones)."""
    # [3] backward: the gradient of the loss for every parameter
    value, grads = jax.value_and_grad(loss)(params, tokens, n_heads)
    # [4] Adam: step every parameter by its gradient's running moments
    updates, adam = optimizer.update(grads, adam, params)
    return optax.apply_updates(params, updates), adam, value


def gradients(params, tokens, n_heads):
    """The gradient of `loss` for every parameter, by jax.grad (train_step's
    backward)."""
    return jax.grad(loss)(params, tokens, n_heads)


def make_optimizer(params, lr, b1, b2, eps):
    """optax.adam, a pair of pure functions (init, update), and the state that
    its init made (m, v and the step count): the state is data, apart."""
    optimizer = optax.adam(lr, b1=b1, b2=b2, eps=eps)
    return optimizer, optimizer.init(params)


def compile_train_step():
    """jax.jit of train_step: the whole step, backward and Adam, one program."""
    return jax.jit(train_step, static_argnames=("n_heads", "optimizer"))


def as_tokens(tokens):
    """int tokens (B, T) from NumPy as a JAX int32 array (int64 needs x64)."""
    return jnp.asarray(tokens, dtype=jnp.int32)
