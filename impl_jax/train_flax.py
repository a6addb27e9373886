"""The same model as an nnx.Module, trained with nnx.Optimizer (docs/train.md).

impl_jax/train.py passes the parameters around as a dict; flax keeps them in
the module, as nnx.Embed, nnx.Param, our CausalSelfAttention (module.py) per
layer and nnx.Linear, and nnx.Optimizer updates them in place. The training
step reads as in train.py. Shapes: B batch, T sequence, C = d_model, V vocab.
"""

from __future__ import annotations

import jax.numpy as jnp
import optax
from flax import nnx

from impl_jax.arrays import require_x64_for
from impl_jax.module import CausalSelfAttention
from impl_jax.train import cross_entropy, layer_weights, n_layers
from shared.train import LAYER_WEIGHTS


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


def loss(model, tokens):
    """The model's loss on a batch of tokens (B, T): a scalar."""
    # [1] forward: embed, L attention layers on the residual stream, unembed
    logits, _ = model(tokens)
    # [2] loss: cross-entropy of every next token
    return cross_entropy(logits, tokens)


def train_step(model, adam, tokens):
    """One step of training, in place on `model` and `adam`; returns the loss."""
    # [3] backward: the gradient of the loss for every parameter
    value, grads = nnx.value_and_grad(loss)(model, tokens)
    # [4] Adam: step every parameter by its gradient's running moments
    adam.update(model, grads)
    return value


def make_optimizer(model, lr, b1, b2, eps):
    """nnx.Optimizer: optax.adam and its state, kept beside the model."""
    return nnx.Optimizer(model, optax.adam(lr, b1=b1, b2=b2, eps=eps), wrt=nnx.Param)


def compile_train_step():
    """nnx.jit of train_step: the module's state in and out of one program."""
    return nnx.jit(train_step)
