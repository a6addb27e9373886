"""What PyTorch adds to the lesson: a map over heads (torch.func.vmap), the
gradient from its autograd tape, its fused attention
(F.scaled_dot_product_attention) and its own attention layer
(nn.MultiheadAttention), each equal to the lesson (docs/reading.md, "What
each framework adds")."""

import torch
import torch.nn.functional as F
from torch import nn

from impl_torch import lesson


def heads_of(w, n_heads):
    """(C, C) -> (H, C, D): each head's columns of a projection."""
    C = w.shape[0]
    return w.reshape(C, n_heads, C // n_heads).swapaxes(0, 1)  # (C, H, D) -> (H, C, D)


def every_head(x, w_q, w_k, w_v, n_heads):
    """The one-head lesson mapped over the heads: out (H, T, D), weights (H, T, T)."""
    q_heads, k_heads, v_heads = (heads_of(w, n_heads) for w in (w_q, w_k, w_v))
    over_heads = torch.func.vmap(lesson.single_head_attention, in_dims=(None, 0, 0, 0))
    return over_heads(x, q_heads, k_heads, v_heads)  # x shared, weights per head


def gradient(x, w_q, w_k, w_v):
    """dL/dw_q (C, D) for L = out.sum(): recorded on the tape, replayed back."""
    w_q = w_q.detach().requires_grad_()  # a leaf: each use of it is recorded
    out, _ = lesson.single_head_attention(x, w_q, w_k, w_v)  # runs and records
    out.sum().backward()  # the tape, replayed in reverse into w_q.grad
    return w_q.grad  # (C, D)


def fused(x, w_q, w_k, w_v):
    """One head through torch's fused attention: steps 3 to 7 in one call,
    out (T, D); no weights come back (a fused kernel never stores them)."""
    q, k, v = x @ w_q, x @ w_k, x @ w_v  # (T, C) @ (C, D) -> (T, D)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (T, D)


def as_layer(w_q, w_k, w_v, w_o, n_heads):
    """The lesson's heads as torch's own layer, with our (in, out) weights."""
    C = w_q.shape[0]
    layer = nn.MultiheadAttention(C, n_heads, bias=False, batch_first=True)
    layer = layer.to(w_q.dtype)
    with torch.no_grad():  # nn keeps (out, in): x @ W.T
        layer.in_proj_weight.copy_(torch.cat([w_q.T, w_k.T, w_v.T]))  # (3C, C)
        layer.out_proj.weight.copy_(w_o.T)  # (C, C)
    return layer


def call_layer(layer, x):
    """A layer is called as a layer: out (T, C), weights (H, T, T)."""
    T = x.shape[-2]
    future = torch.ones(T, T, dtype=torch.bool).triu(1)  # True: may NOT attend
    return layer(
        x, x, x, attn_mask=future, need_weights=True, average_attn_weights=False
    )
