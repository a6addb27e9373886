"""Training a tiny attention-only language model in PyTorch: autograd and
torch.optim.Adam (docs/train.md).

The model (shared/train.py): token and position embeddings, L layers of our
multi_head_attention added to the residual stream, an unembedding, the
cross-entropy of every next token. impl_numpy/ and impl_jax/ hold the same
file, by hand and with optax; the training step reads the same in all three.
Shapes: B batch, T sequence, C = d_model, H heads, V vocabulary.
"""

from __future__ import annotations

import functools

import torch

from impl_torch.arrays import from_numpy
from impl_torch.attention import multi_head_attention
from shared.train import LAYER_WEIGHTS


def init_params(params, dtype):
    """The shared float64 parameters as leaf tensors of `dtype` for autograd."""
    return {name: from_numpy(w, dtype).requires_grad_() for name, w in params.items()}


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
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())


def loss(params, tokens, n_heads):
    """The model's loss on a batch of tokens (B, T): a scalar."""
    # [1] forward: embed, L attention layers on the residual stream, unembed
    logits, _ = forward(params, tokens, n_heads)
    # [2] loss: cross-entropy of every next token
    return cross_entropy(logits, tokens)


def train_step(params, adam, tokens, n_heads, *, loss_fn=loss):
    """One step of training, in place on `params` and `adam`; returns the loss.
    `loss_fn`: `loss`, or what compile_train_step compiled of it."""
    value = loss_fn(params, tokens, n_heads)  # autograd records it: the tape
    # [3] backward: the gradient of the loss for every parameter
    adam.zero_grad()
    value.backward()  # autograd fills each parameter's .grad
    # [4] Adam: step every parameter by its gradient's running moments
    adam.step()
    return value.detach()


def gradients(params, tokens, n_heads):
    """The gradient of `loss` for every parameter, by autograd (train_step's
    backward, without touching .grad)."""
    value = loss(params, tokens, n_heads)
    grads = torch.autograd.grad(value, list(params.values()))
    return dict(zip(params, grads, strict=True))


def make_optimizer(params, lr, b1, b2, eps):
    """torch.optim.Adam over the parameters; it keeps m, v and the step count."""
    return torch.optim.Adam(params.values(), lr=lr, betas=(b1, b2), eps=eps)


def compile_train_step():
    """train_step with torch.compile of `loss`: one graph, whose backward
    AOTAutograd compiles too; Adam's step stays eager (why: docs/train.md)."""
    compiled = torch.compile(loss, fullgraph=True, dynamic=False)
    return functools.partial(train_step, loss_fn=compiled)


def as_tokens(tokens):
    """int tokens (B, T) from NumPy as a torch int64 tensor (what indexing takes)."""
    return from_numpy(tokens, "int64")
