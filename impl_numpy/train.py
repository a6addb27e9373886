"""Training a tiny attention-only language model in NumPy: every gradient and
Adam by hand (the derivations: docs/train.md).

The model (shared/train.py): token and position embeddings, L layers of our
multi_head_attention added to the residual stream, an unembedding, the
cross-entropy of every next token. impl_torch/ and impl_jax/ hold the same
file with autodiff and their optimizers (torch.optim, optax); the training
step reads the same in all three.
Shapes: B batch, T sequence, C = d_model, H heads, V vocabulary.
"""

from __future__ import annotations

import numpy as np

from impl_numpy.attention import multi_head_attention
from impl_numpy.backward import multi_head_attention_backward, sum_over_positions
from shared.train import LAYER_WEIGHTS


def init_params(params, dtype):
    """The shared float64 parameters as this backend's arrays of `dtype`."""
    return {name: np.array(w, dtype=dtype) for name, w in params.items()}


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
    top = logits.max(axis=-1, keepdims=True)  # (B, T-1, 1): exp cannot overflow
    log_z = top[..., 0] + np.log(np.exp(logits - top).sum(axis=-1))  # (B, T-1)
    picked = np.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return (log_z - picked).mean()


def loss(params, tokens, n_heads):
    """The model's loss on a batch of tokens (B, T): a scalar."""
    # [1] forward: embed, L attention layers on the residual stream, unembed
    logits, _ = forward(params, tokens, n_heads)
    # [2] loss: cross-entropy of every next token
    return cross_entropy(logits, tokens)


def train_step(params, adam, tokens, n_heads):
    """One step of training, in place on `params` and `adam`; returns the loss."""
    value = loss(params, tokens, n_heads)
    # [3] backward: the gradient of the loss for every parameter
    grads = gradients(params, tokens, n_heads)
    # [4] Adam: step every parameter by its gradient's running moments
    adam_step(params, grads, adam)
    return value


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


def make_optimizer(params, lr, b1, b2, eps):
    """Adam's state: zero moments m, v per parameter, the step count, settings."""
    zeros = {name: np.zeros_like(w) for name, w in params.items()}
    moments = {"m": zeros, "v": {name: w.copy() for name, w in zeros.items()}}
    return {**moments, "t": 0, "lr": lr, "b1": b1, "b2": b2, "eps": eps}


def adam_step(params, grads, adam):
    """Adam (Kingma and Ba, 2015, Algorithm 1), in place on params and adam."""
    adam["t"] += 1
    lr, b1, b2, eps, t = (adam[k] for k in ("lr", "b1", "b2", "eps", "t"))
    for name, g in grads.items():
        m = adam["m"][name] = b1 * adam["m"][name] + (1 - b1) * g  # mean of g
        v = adam["v"][name] = b2 * adam["v"][name] + (1 - b2) * g * g  # of g²
        m_hat, v_hat = m / (1 - b1**t), v / (1 - b2**t)  # unbiased from 0
        params[name] -= lr * m_hat / (np.sqrt(v_hat) + eps)


def as_tokens(tokens):
    """int tokens (B, T) from NumPy as this backend's int64 array."""
    return np.asarray(tokens, dtype=np.int64)
