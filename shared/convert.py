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
  out kernel (H, D, C), and their biases;
- transformers' attention of Llama, Mistral, Qwen 2, Qwen 3, Gemma 2, Gemma 3
  and gpt-oss (TRANSFORMERS_LAYERS): q_proj, k_proj, v_proj, o_proj and the
  variant their config gives the layer (GQA, head_dim, rotary positions, the
  sliding window, soft-capping, sinks, QK-norm), as `LayerParams.variant`.

How each layout maps to ours is in shared/layout.py (and docs/layers.md).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from shared.dtypes import np_dtype
from shared.layout import (
    from_flax_heads_in,
    from_flax_heads_out,
    from_torch_in_proj,
    from_torch_linear,
)
from shared.variants import Rotary, Variant

TRANSFORMERS_LAYERS = (
    "LlamaAttention", "MistralAttention", "Qwen2Attention", "Qwen3Attention",
    "Gemma2Attention", "Gemma3Attention", "GptOssAttention",
)  # fmt: skip
"""transformers' attention layers `params_from` reads with their variant."""

SUPPORTED = (
    "a torch nn.MultiheadAttention, a transformers GPT2Attention, a nanoGPT-style "
    "CausalSelfAttention (c_attn, c_proj and n_head), a flax nnx.MultiHeadAttention "
    "or a transformers " + ", ".join(TRANSFORMERS_LAYERS)
)


@dataclass(frozen=True)
class LayerParams:
    """One attention layer's parameters in our layout, float64.

    Attributes:
        w_q, w_k, w_v, w_o: (C, C), applied as x @ w; with a variant, w_q
            (C, H * D), w_k and w_v (C, H_kv * D), w_o (H * D, C).
        b_q, b_k, b_v, b_o: biases to match, or None where the layer has none.
        n_heads: H.
        scale: whether the layer divides scores by sqrt(D).
        dtype: the name of the layer's own dtype, e.g. "float32".
        source: what the layer was, e.g. "transformers GPT2Attention".
        variant: the Variant that makes `multi_head_attention` this layer
            (docs/variants.md), arrays float64; None for plain attention.
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
    variant: Variant | None = None

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

    def variant_as(self, dtype: str) -> Variant | None:
        """The variant, its arrays (sinks, q_norm, k_norm) cast to `dtype`."""
        if self.variant is None:
            return None
        arrays = self.variant.arrays.items()
        cast = {n: a.astype(np_dtype(dtype)) for n, a in arrays}
        return dataclasses.replace(self.variant, **cast)


def params_from(layer) -> LayerParams:
    """The parameters of an attention layer of another library.

    Raises:
        TypeError: `layer` is none of the supported layers.
        ValueError: it is one, set up as something other than causal
            self-attention with our projections (cross-attention, extra key and
            value biases, normalized queries and keys, scaling by layer index),
            or a transformers layer with what no option gives (scaled rotary
            positions, bidirectional attention).
    """
    kind = type(layer).__name__
    if kind in TRANSFORMERS_LAYERS:
        return _transformers(layer)
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


def _transformers(layer) -> LayerParams:
    """A transformers Llama-family attention layer, and the variant its config
    gives it, read from the layer and its config as its forward reads them."""
    kind, config = type(layer).__name__, layer.config
    if not getattr(layer, "is_causal", True):
        raise ValueError(f"a {kind} with use_bidirectional_attention is not causal")
    H, H_kv = config.num_attention_heads, config.num_key_value_heads
    D = layer.head_dim
    names = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj"}
    linears = {n: getattr(layer, m) for n, m in names.items()}
    w = {n: from_torch_linear(_numpy(lin.weight)) for n, lin in linears.items()}
    b = {n: _numpy(lin.bias) for n, lin in linears.items()}
    variant = dict(n_kv_heads=H_kv, head_dim=D)
    variant["rotary"] = _rotary(layer, kind, config)
    window = getattr(layer, "sliding_window", getattr(config, "sliding_window", None))
    if window is not None:
        variant["window"] = int(window)
    if getattr(layer, "attn_logit_softcapping", None) is not None:
        variant["softcap"] = float(layer.attn_logit_softcapping)
    if getattr(layer, "sinks", None) is not None:
        variant["sinks"] = _numpy(layer.sinks)
    # Our scale is 1 / sqrt(D); a layer's other one (Gemma's
    # query_pre_attn_scalar ** -0.5) is folded into q, as the one linear map
    # before the scores: into q_norm's weight where there is one (RMSNorm
    # would undo it in w_q), else into w_q and b_q.
    ratio = float(layer.scaling) * np.sqrt(D)
    if hasattr(layer, "q_norm"):
        variant["q_norm"] = _rms_weight(layer.q_norm) * ratio
        variant["k_norm"] = _rms_weight(layer.k_norm)
        norm = layer.q_norm  # Llama's RMSNorm names it variance_epsilon, Gemma's eps
        eps = norm.variance_epsilon if hasattr(norm, "variance_epsilon") else norm.eps
        variant["qk_norm_eps"] = float(eps)
    else:
        w["q"] = w["q"] * ratio
        b["q"] = None if b["q"] is None else b["q"] * ratio
    return LayerParams(
        w["q"], w["k"], w["v"], w["o"], b["q"], b["k"], b["v"], b["o"],
        H, True, _dtype(layer.q_proj.weight), f"transformers {kind}",
        Variant(**{n: v for n, v in variant.items() if v is not None}),
    )  # fmt: skip


def _rotary(layer, kind: str, config):
    """The layer's Rotary from its config's rope_parameters (one dict, or one
    per layer type as Gemma 3's); a scaled one is refused."""
    found = config.rope_parameters
    layer_type = getattr(config, "layer_types", None)
    if layer_type is not None and layer_type[layer.layer_idx] in found:
        found = found[layer_type[layer.layer_idx]]
    rope_type = found.get("rope_type", "default")
    if rope_type != "default":
        raise ValueError(scaled_rotary_message(f"a {kind}", rope_type))
    fraction = found.get(
        "partial_rotary_factor", getattr(config, "partial_rotary_factor", 1.0)
    )
    return Rotary(base=float(found["rope_theta"]), fraction=float(fraction))


def _rms_weight(norm) -> np.ndarray:
    """An RMSNorm's weight as ours multiplies by it: Gemma's RMSNorm
    multiplies by (1 + weight), the others by weight."""
    weight = _numpy(norm.weight)
    return 1.0 + weight if type(norm).__name__.startswith("Gemma") else weight


def scaled_rotary_message(what: str, rope_type: str) -> str:
    """Why a layer with scaled rotary positions is refused, in one line."""
    return (
        f"{what} with rope_type {rope_type!r} (rope_scaling) scales its rotary "
        "frequencies, which Rotary does not (docs/variants.md)"
    )


def scaled_rope_type(config) -> str | None:
    """The first rope_type other than "default" in a transformers config's
    rope_parameters (one dict, or one per layer type), or None: read before
    the model's weights are loaded."""
    found = getattr(config, "rope_parameters", None) or {}
    kinds = (
        found.values() if all(isinstance(v, dict) for v in found.values()) else [found]
    )
    for parameters in kinds:
        rope_type = parameters.get("rope_type", "default")
        if rope_type != "default":
            return rope_type
    return None
