"""Another library's attention layer as our parameters: float64 NumPy arrays in
our (in, out) layout, ready for any backend (`CausalSelfAttention.from_layer`
in each one is built on `params_from`).

Supported, recognized by their attributes (no framework is imported here):

- torch `nn.MultiheadAttention`: in_proj_weight (3C, C) (or q/k/v_proj_weight),
  in_proj_bias, out_proj;
- transformers `GPT2Attention`: c_attn and c_proj, Conv1D layers whose weight
  is (in, out) already, num_heads;
- nanoGPT's `CausalSelfAttention`: c_attn and c_proj, nn.Linear layers whose
  weight is (out, in), n_head;
- flax `nnx.MultiHeadAttention`: query, key and value kernels (C, H, D), the
  out kernel (H, D, C), and their biases.

How each layout maps to ours is in shared/layout.py (and docs/layers.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shared.dtypes import np_dtype
from shared.layout import (
    from_flax_heads_in,
    from_flax_heads_out,
    from_torch_in_proj,
    from_torch_linear,
)

SUPPORTED = (
    "a torch nn.MultiheadAttention, a transformers GPT2Attention, a nanoGPT-style "
    "CausalSelfAttention (c_attn, c_proj and n_head) or a flax nnx.MultiHeadAttention"
)


@dataclass(frozen=True)
class LayerParams:
    """One attention layer's parameters in our layout, float64.

    Attributes:
        w_q, w_k, w_v, w_o: (C, C), applied as x @ w.
        b_q, b_k, b_v, b_o: (C,) biases, or None where the layer has none.
        n_heads: H.
        scale: whether the layer divides scores by sqrt(D).
        dtype: the name of the layer's own dtype, e.g. "float32".
        source: what the layer was, e.g. "transformers GPT2Attention".
    """

    w_q: np.ndarray
    w_k: np.ndarray
    w_v: np.ndarray
    w_o: np.ndarray
    b_q: np.ndarray | None
    b_k: np.ndarray | None
    b_v: np.ndarray | None
    b_o: np.ndarray | None
    n_heads: int
    scale: bool
    dtype: str
    source: str

    @property
    def weights(self) -> tuple[np.ndarray, ...]:
        """w_q, w_k, w_v, w_o, in the order the functions take them."""
        return self.w_q, self.w_k, self.w_v, self.w_o

    @property
    def biases(self) -> dict[str, np.ndarray | None]:
        """b_q, b_k, b_v, b_o by name, for the functions' keyword arguments."""
        return {"b_q": self.b_q, "b_k": self.b_k, "b_v": self.b_v, "b_o": self.b_o}

    def weights_as(self, dtype: str) -> tuple[np.ndarray, ...]:
        """The weights cast to `dtype` (a name; bfloat16 through ml_dtypes)."""
        return tuple(w.astype(np_dtype(dtype)) for w in self.weights)

    def biases_as(self, dtype: str) -> dict[str, np.ndarray | None]:
        """The biases cast to `dtype`, None where the layer has none."""
        return {
            n: None if b is None else b.astype(np_dtype(dtype))
            for n, b in self.biases.items()
        }


def params_from(layer) -> LayerParams:
    """The parameters of an attention layer of another library.

    Raises:
        TypeError: `layer` is none of the supported layers.
        ValueError: it is one, set up as something other than causal
            self-attention with our projections (cross-attention, extra key and
            value biases, normalized queries and keys, scaling by layer index).
    """
    kind = type(layer).__name__
    if kind == "MultiheadAttention" and hasattr(layer, "in_proj_bias"):
        return _torch_multihead(layer)
    if kind == "MultiHeadAttention" and hasattr(layer, "query"):
        return _flax_multihead(layer)
    if hasattr(layer, "c_attn") and hasattr(layer, "c_proj"):
        if hasattr(layer.c_attn, "nf"):  # transformers' Conv1D keeps (in, out)
            return _gpt2(layer)
        if hasattr(layer, "n_head"):
            return _nanogpt(layer)
    raise TypeError(f"params_from takes {SUPPORTED}; got {kind}")


def _numpy(tensor) -> np.ndarray | None:
    """A torch tensor or JAX array (or None) as a float64 NumPy array."""
    if tensor is None:
        return None
    if hasattr(tensor, "detach"):  # torch: off the tape and the device first
        tensor = tensor.detach().cpu().double()
    return np.asarray(tensor, dtype=np.float64)


def _dtype(tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def _split3(a: np.ndarray | None, axis: int) -> tuple:
    return (None, None, None) if a is None else tuple(np.split(a, 3, axis=axis))


def _torch_multihead(layer) -> LayerParams:
    E = layer.embed_dim
    if layer.kdim != E or layer.vdim != E:
        raise ValueError(
            f"nn.MultiheadAttention with kdim={layer.kdim}, vdim={layer.vdim} and "
            f"embed_dim={E} is cross-attention, not self-attention"
        )
    if layer.bias_k is not None or layer.add_zero_attn:
        raise ValueError(
            "nn.MultiheadAttention with add_bias_kv or add_zero_attn attends to "
            "extra keys that causal self-attention does not have"
        )
    if layer.in_proj_weight is not None:  # packed: [w_q^T; w_k^T; w_v^T]
        w_q, w_k, w_v = from_torch_in_proj(_numpy(layer.in_proj_weight))
        dtype = _dtype(layer.in_proj_weight)
    else:
        w_q, w_k, w_v = (
            from_torch_linear(_numpy(getattr(layer, f"{n}_proj_weight"))) for n in "qkv"
        )
        dtype = _dtype(layer.q_proj_weight)
    b_q, b_k, b_v = _split3(_numpy(layer.in_proj_bias), axis=0)
    return LayerParams(
        w_q,
        w_k,
        w_v,
        from_torch_linear(_numpy(layer.out_proj.weight)),
        b_q,
        b_k,
        b_v,
        _numpy(layer.out_proj.bias),
        layer.num_heads,
        True,
        dtype,
        "torch nn.MultiheadAttention",
    )


def _gpt2(layer) -> LayerParams:
    if getattr(layer, "is_cross_attention", False):
        raise ValueError(
            "a GPT2Attention with is_cross_attention is not self-attention"
        )
    if getattr(layer, "scale_attn_by_inverse_layer_idx", False):
        raise ValueError(
            "a GPT2Attention with scale_attn_by_inverse_layer_idx divides scores by "
            "layer_idx + 1 too, which our attention does not"
        )
    w_q, w_k, w_v = _split3(_numpy(layer.c_attn.weight), axis=1)  # (C, 3C): (in, out)
    b_q, b_k, b_v = _split3(_numpy(layer.c_attn.bias), axis=0)
    return LayerParams(
        w_q,
        w_k,
        w_v,
        _numpy(layer.c_proj.weight),
        b_q,
        b_k,
        b_v,
        _numpy(layer.c_proj.bias),
        layer.num_heads,
        bool(layer.scale_attn_weights),
        _dtype(layer.c_attn.weight),
        "transformers GPT2Attention",
    )


def _nanogpt(layer) -> LayerParams:
    weight = from_torch_linear(_numpy(layer.c_attn.weight))  # (3C, C) -> (C, 3C)
    w_q, w_k, w_v = _split3(weight, axis=1)
    b_q, b_k, b_v = _split3(_numpy(layer.c_attn.bias), axis=0)
    return LayerParams(
        w_q,
        w_k,
        w_v,
        from_torch_linear(_numpy(layer.c_proj.weight)),
        b_q,
        b_k,
        b_v,
        _numpy(layer.c_proj.bias),
        layer.n_head,
        True,
        _dtype(layer.c_attn.weight),
        "nanoGPT CausalSelfAttention",
    )


def _flax_multihead(layer) -> LayerParams:
    if getattr(layer, "normalize_qk", False):
        raise ValueError(
            "an nnx.MultiHeadAttention with normalize_qk normalizes queries and keys, "
            "which our attention does not"
        )
    sizes = {layer.in_features, layer.qkv_features, layer.out_features}
    if len(sizes) != 1:
        raise ValueError(
            "an nnx.MultiHeadAttention needs in_features = qkv_features = "
            f"out_features for self-attention with (C, C) projections, got {sizes}"
        )

    def bias(dense):
        value = getattr(dense, "bias", None)
        return None if value is None else _numpy(value[...]).reshape(-1)

    kernels = (layer.query.kernel, layer.key.kernel, layer.value.kernel)
    w_q, w_k, w_v = (from_flax_heads_in(_numpy(k[...])) for k in kernels)
    return LayerParams(
        w_q,
        w_k,
        w_v,
        from_flax_heads_out(_numpy(layer.out.kernel[...])),
        bias(layer.query),
        bias(layer.key),
        bias(layer.value),
        bias(layer.out),
        layer.num_heads,
        True,
        str(layer.query.kernel[...].dtype),
        "flax nnx.MultiHeadAttention",
    )
