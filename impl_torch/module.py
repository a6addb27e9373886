"""The module form in PyTorch: an nn.Module built on four nn.Linear layers.

nn.Linear stores its weight as (out, in) and computes x @ weight.T; our
functional form takes (in, out). `from_weights` maps one to the other through
`shared.layout`, so the module and the function hold the same numbers.
"""

from __future__ import annotations

import torch
from torch import nn

from impl_torch import attention, kv_cache
from impl_torch.arrays import from_numpy
from shared.convert import params_from
from shared.dtypes import dtype_name
from shared.layout import to_torch_linear
from shared.validation import check_heads, check_numpy_weights


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention.

    Attributes:
        q_proj, k_proj, v_proj, out_proj: nn.Linear(C, C), with biases or not.
        n_heads: H.
        scale: divide scores by sqrt(D).
    """

    def __init__(
        self, d_model, n_heads, *, bias=False, scale=True, device=None, dtype=None
    ):
        super().__init__()
        self.n_heads = check_heads(d_model, n_heads)
        self.scale = scale
        kwargs = dict(bias=bias, device=device, dtype=dtype)
        self.q_proj = nn.Linear(d_model, d_model, **kwargs)
        self.k_proj = nn.Linear(d_model, d_model, **kwargs)
        self.v_proj = nn.Linear(d_model, d_model, **kwargs)
        self.out_proj = nn.Linear(d_model, d_model, **kwargs)

    @classmethod
    def from_weights(
        cls,
        w_q,
        w_k,
        w_v,
        w_o,
        n_heads,
        *,
        scale=True,
        b_q=None,
        b_k=None,
        b_v=None,
        b_o=None,
        device=None,
    ):
        """A module loaded with (C, C) NumPy projections in the (in, out) layout
        and the (C,) biases given (zeros for the others if any is)."""
        given = check_numpy_weights(
            w_q=w_q, w_k=w_k, w_v=w_v, w_o=w_o, b_q=b_q, b_k=b_k, b_v=b_v, b_o=b_o
        )
        bias = any(name.startswith("b_") for name in given)
        dtype = getattr(torch, dtype_name(w_q))
        module = cls(
            w_q.shape[0], n_heads, bias=bias, scale=scale, device=device, dtype=dtype
        )
        layers = {"q": module.q_proj, "k": module.k_proj, "v": module.v_proj}
        layers["o"] = module.out_proj
        with torch.no_grad():
            for layer in layers.values():
                if layer.bias is not None:
                    layer.bias.zero_()  # the biases not given
            for name, array in given.items():
                kind, key = name.split("_")
                if kind == "w":  # nn.Linear keeps (out, in)
                    layers[key].weight.copy_(from_numpy(to_torch_linear(array)))
                else:
                    layers[key].bias.copy_(from_numpy(array))  # bfloat16 too
        return module

    @classmethod
    def from_layer(cls, layer, *, device=None):
        """A module with the parameters of another library's attention layer
        (shared.convert.params_from says which), in the layer's dtype."""
        p = params_from(layer)
        weights, biases = p.weights_as(p.dtype), p.biases_as(p.dtype)
        return cls.from_weights(
            *weights, p.n_heads, scale=p.scale, device=device, **biases
        )

    def forward(self, x, mask=None):
        """x (..., T, C) -> out (..., T, C), weights (..., H, T, T)."""
        return attention.multi_head_attention(
            x,
            *self.projections(),
            self.n_heads,
            mask,
            scale=self.scale,
            **self.biases(),
        )

    def projections(self):
        """w_q, w_k, w_v, w_o (C, C) in our (in, out) layout: nn.Linear keeps
        (out, in) and computes x @ weight.T, so each is weight.T (a view)."""
        linears = (self.q_proj, self.k_proj, self.v_proj, self.out_proj)
        return tuple(linear.weight.T for linear in linears)

    def biases(self):
        """b_q, b_k, b_v, b_o by name: each Linear's bias (C,), or None. Read on
        every call, so a layer swapped for a biased one counts in forward and in
        decode_step alike."""
        linears = (self.q_proj, self.k_proj, self.v_proj, self.out_proj)
        names = ("b_q", "b_k", "b_v", "b_o")
        return {name: linear.bias for name, linear in zip(names, linears, strict=True)}

    def init_cache(self, batch, max_len):
        """An empty KVCache for decoding up to `max_len` tokens (kv_cache.py),
        in the weights' dtype and on their device.

        batch: the leading axes of x, e.g. () for one sequence.
        """
        weight = self.q_proj.weight
        return kv_cache.init_kv_cache(
            batch,
            max_len,
            weight.shape[1],
            self.n_heads,
            dtype_name(weight),
            device=weight.device,
        )

    @torch.no_grad()
    def decode_step(self, x_t, cache):
        """x_t (..., C), cache -> out_t (..., C), the cache with x_t in it.

        Decoding is inference: it runs under torch.no_grad(), so the cache,
        written in place, carries no autograd graph from step to step.
        """
        return kv_cache.decode_step(
            x_t,
            cache,
            *self.projections(),
            self.n_heads,
            scale=self.scale,
            **self.biases(),
        )
