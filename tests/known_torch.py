"""Correct torch attention as other people write it, for `triptych check`:
nanoGPT's CausalSelfAttention as karpathy/nanoGPT's model.py has it (a
config, `B, T, C = x.size()`, q, k, v packed in c_attn, SDPA with
is_causal=True, or the tril `bias` buffer where SDPA is missing), a module in
the style of timm's Attention (`B, N, C = x.shape`, a packed `qkv` and
`proj`, made causal), transformers' GPT-2 attention with a random config
(eager and SDPA), and a hand-written kernel on (B, H, T, D) only.

tests/test_torch_check.py checks them with a few examples;
tests/measure_known.py measures them with the defaults for docs/check.md.
Nothing here is downloaded: every weight is random, and the check loads its
own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F

# nanoGPT (karpathy/nanoGPT, model.py), the attention block as written there


@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        # key, query, value projections for all heads, but in a batch
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        # output projection
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        # regularization
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        # flash attention make GPU go brrrrr but support is only in PyTorch >= 2.0
        self.flash = hasattr(torch.nn.functional, "scaled_dot_product_attention")
        if not self.flash:
            print(
                "WARNING: using slow attention. Flash Attention requires PyTorch >= 2.0"
            )
            # causal mask to ensure that attention is only applied to the left
            # in the input sequence
            self.register_buffer(
                "bias",
                torch.tril(torch.ones(config.block_size, config.block_size)).view(
                    1, 1, config.block_size, config.block_size
                ),
            )

    def forward(self, x):
        # batch size, sequence length, embedding dimensionality (n_embd)
        B, T, C = x.size()

        # calculate query, key, values for all heads in batch and move head
        # forward to be the batch dim
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(
            1, 2
        )  # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(
            1, 2
        )  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(
            1, 2
        )  # (B, nh, T, hs)

        # causal self-attention; Self-attend: (B, nh, T, hs) x (B, nh, hs, T)
        # -> (B, nh, T, T)
        if self.flash:
            # efficient attention using Flash Attention CUDA kernels
            y = torch.nn.functional.scaled_dot_product_attention(
                q,
                k,
                v,
                attn_mask=None,
                dropout_p=self.dropout if self.training else 0,
                is_causal=True,
            )
        else:
            # manual implementation of attention
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            att = self.attn_dropout(att)
            y = att @ v  # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
        # re-assemble all head outputs side by side
        y = y.transpose(1, 2).contiguous().view(B, T, C)

        # output projection
        y = self.resid_dropout(self.c_proj(y))
        return y


def nanogpt_without_flash(n_embd=16, n_head=4):
    """nanoGPT's block as it runs where SDPA is missing: the manual softmax
    under its tril `bias` buffer."""
    config = GPTConfig(n_embd=n_embd, n_head=n_head, block_size=128)
    module = CausalSelfAttention(config)
    module.flash = False
    module.register_buffer(
        "bias",
        torch.tril(torch.ones(config.block_size, config.block_size)).view(
            1, 1, config.block_size, config.block_size
        ),
    )
    return module.eval()


nanogpt = CausalSelfAttention(GPTConfig(n_embd=16, n_head=4, block_size=128)).eval()
nanogpt_slow = nanogpt_without_flash()


# timm's Attention, made causal (timm's is bidirectional, for images)


class Attention(nn.Module):
    def __init__(self, dim, num_heads=8, qkv_bias=False, attn_drop=0.0, proj_drop=0.0):
        super().__init__()
        assert dim % num_heads == 0, "dim should be divisible by num_heads"
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x):
        B, N, C = x.shape
        qkv = (
            self.qkv(x)
            .reshape(B, N, 3, self.num_heads, self.head_dim)
            .permute(2, 0, 3, 1, 4)
        )
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(
            q,
            k,
            v,
            dropout_p=self.attn_drop.p if self.training else 0.0,
            is_causal=True,
        )
        x = x.transpose(1, 2).reshape(B, N, C)
        x = self.proj(x)
        x = self.proj_drop(x)
        return x


timm_style = Attention(16, num_heads=4).eval()


# transformers' GPT-2 attention, with a random config (nothing downloaded)


def gpt2_attention(implementation: str, n_embd=16, n_head=4):
    """GPT2Attention of a small random GPT2Config, in `implementation`
    ("eager" or "sdpa"), without dropout."""
    from transformers import GPT2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2Attention

    config = GPT2Config(
        n_embd=n_embd, n_head=n_head, n_positions=128, attn_pdrop=0.0, resid_pdrop=0.0
    )
    config._attn_implementation = implementation
    return GPT2Attention(config, layer_idx=0).eval()


gpt2_eager = gpt2_attention("eager")
gpt2_sdpa = gpt2_attention("sdpa")


# A hand-written kernel that takes (B, H, T, D) and nothing else


def bhtd_attention(q, k, v, mask=None):
    """q, k, v (B, H, T, D) -> out (B, H, T, D); mask True = may attend."""
    B, H, T, D = q.shape  # noqa: RUF059 (four axes, and only four)
    scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(D)
    allowed = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    if mask is not None:
        allowed = allowed & mask
    scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return torch.matmul(weights, v)
