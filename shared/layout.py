"""Converters between our projection layout and each framework's own.

We write every projection as `x @ W` with W of shape (in, out), as the original
programs did. The frameworks store the same numbers differently:

| where                          | stores                                         |
|--------------------------------|------------------------------------------------|
| torch `nn.Linear.weight`       | (out, in) = W.T                                |
| torch `nn.MultiheadAttention`  | in_proj_weight (3C, C) = [W_q.T; W_k.T; W_v.T] |
|                                | out_proj.weight (C, C) = W_o.T                 |
| flax `nnx.Linear.kernel`       | (in, out) = W itself                           |
| flax `nnx.MultiHeadAttention`  | query, key, value kernels (C, H, D)            |
|                                | out kernel (H, D, C)                           |

Each mapping is one named pair of functions here, on NumPy arrays, and a test
proves every round trip exact. They move numbers only (transpose, split,
reshape), so no conversion ever rounds.
"""

from __future__ import annotations

import numpy as np


def to_torch_linear(w: np.ndarray) -> np.ndarray:
    """(in, out) -> nn.Linear.weight (out, in)."""
    return np.ascontiguousarray(w.T)


def from_torch_linear(weight: np.ndarray) -> np.ndarray:
    """nn.Linear.weight (out, in) -> (in, out)."""
    return np.ascontiguousarray(weight.T)


def to_torch_in_proj(w_q: np.ndarray, w_k: np.ndarray, w_v: np.ndarray) -> np.ndarray:
    """Three (C, C) projections -> nn.MultiheadAttention.in_proj_weight (3C, C)."""
    return np.concatenate([w_q.T, w_k.T, w_v.T], axis=0)


def from_torch_in_proj(in_proj_weight: np.ndarray) -> tuple[np.ndarray, ...]:
    """nn.MultiheadAttention.in_proj_weight (3C, C) -> (w_q, w_k, w_v), each (C, C)."""
    return tuple(np.ascontiguousarray(w.T) for w in np.split(in_proj_weight, 3))


def to_flax_linear(w: np.ndarray) -> np.ndarray:
    """(in, out) -> nnx.Linear.kernel (in, out): flax keeps our layout."""
    return np.array(w)


def from_flax_linear(kernel: np.ndarray) -> np.ndarray:
    """nnx.Linear.kernel (in, out) -> (in, out)."""
    return np.array(kernel)


def to_flax_heads_in(w: np.ndarray, n_heads: int) -> np.ndarray:
    """(C, C) query/key/value projection -> nnx.MultiHeadAttention kernel (C, H, D)."""
    C = w.shape[0]
    return w.reshape(C, n_heads, C // n_heads)  # column h*D + d -> [h, d]


def from_flax_heads_in(kernel: np.ndarray) -> np.ndarray:
    """nnx.MultiHeadAttention query/key/value kernel (C, H, D) -> (C, C)."""
    C, H, D = kernel.shape
    return kernel.reshape(C, H * D)


def to_flax_heads_out(w_o: np.ndarray, n_heads: int) -> np.ndarray:
    """(C, C) output projection -> nnx.MultiHeadAttention out kernel (H, D, C)."""
    C = w_o.shape[1]
    return w_o.reshape(n_heads, C // n_heads, C)  # row h*D + d -> [h, d]


def from_flax_heads_out(kernel: np.ndarray) -> np.ndarray:
    """nnx.MultiHeadAttention out kernel (H, D, C) -> (C, C)."""
    H, D, C = kernel.shape
    return kernel.reshape(H * D, C)
