"""Other torch libraries against the float64 oracle on the same inputs, one
test per row of docs/variants.md: torch's SDPA with enable_gqa, FlexAttention's
score_mod and mask_mod (soft-capping, ALiBi, a sliding window, attention-gym's
window one key wider; eager on the CPU, inference), and transformers' own
attention layers run in float64 with their eager attention and the mask
built from transformers' mask functions: Llama (GQA, NeoX rotary positions),
Qwen 3 (QK-norm, head_dim), Mistral (sliding window), Gemma 2 (soft-capping,
query_pre_attn_scalar, window on alternate layers), gpt-oss (sinks, biases,
window), GLM (GPT-J rotary on half the head), Phi (NeoX rotary on part of
the head), and BLOOM's ALiBi slopes."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from shared import assert_close
from shared.reference import reference_multi_head
from shared.variants import Rotary, Variant, alibi_slopes

B, T, C, H, H_KV, D = 2, 6, 16, 4, 2, 4


def _rng(seed):
    return np.random.default_rng(seed)


def _heads(a, n):
    """(B, T, n * D) -> (B, n, T, D), as torch tensors."""
    return torch.from_numpy(a).reshape(B, T, n, -1).transpose(1, 2)


def _merged(t):
    return t.transpose(1, 2).reshape(B, T, -1).numpy()


def test_sdpa_with_enable_gqa_equals_the_oracle():
    """SDPA(enable_gqa=True): query head h reads KV head h // (H / H_kv)."""
    rng = _rng(280)
    x = rng.standard_normal((B, T, C))
    w_q, w_o = (rng.standard_normal((C, C)) / 4 for _ in "qo")
    w_k, w_v = (rng.standard_normal((C, H_KV * D)) / 4 for _ in "kv")
    q, k, v = _heads(x @ w_q, H), _heads(x @ w_k, H_KV), _heads(x @ w_v, H_KV)
    out = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True, enable_gqa=True
    )
    expected, _ = reference_multi_head(
        x, w_q, w_k, w_v, w_o, H, variant=Variant(n_kv_heads=H_KV)
    )
    assert_close(_merged(out) @ w_o, expected, "float64", "SDPA enable_gqa")


def _flex(q, k, v, score_mod=None, mask_mod=None):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    def both(b, h, q_idx, kv_idx):
        return causal(b, h, q_idx, kv_idx) & mask_mod(b, h, q_idx, kv_idx)

    block_mask = create_block_mask(
        causal if mask_mod is None else both, None, None, T, T, device="cpu"
    )
    with warnings.catch_warnings():  # eager: "an unfused implementation"
        warnings.simplefilter("ignore", UserWarning)
        return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)


@pytest.fixture(scope="module")
def flex_problem():
    rng = _rng(281)
    x = rng.standard_normal((B, T, C))
    w = [rng.standard_normal((C, C)) / 2 for _ in range(4)]
    q, k, v = (_heads(x @ w[n], H) for n in range(3))
    return x, w, q, k, v


def test_flex_attention_soft_cap_equals_the_oracle(flex_problem):
    x, w, q, k, v = flex_problem

    def soft_cap(score, b, h, q_idx, kv_idx):
        return 0.5 * torch.tanh(score / 0.5)

    out = _flex(q, k, v, score_mod=soft_cap)
    expected, _ = reference_multi_head(x, *w, H, variant=Variant(softcap=0.5))
    assert_close(_merged(out) @ w[3], expected, "float64", "Flex soft-cap")


def test_flex_attention_alibi_equals_the_oracle(flex_problem):
    x, w, q, k, v = flex_problem
    slopes = torch.tensor(alibi_slopes(H), dtype=torch.float64)

    def alibi(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)

    out = _flex(q, k, v, score_mod=alibi)
    expected, _ = reference_multi_head(x, *w, H, variant=Variant(alibi=True))
    assert_close(_merged(out) @ w[3], expected, "float64", "Flex ALiBi")


def test_flex_attention_window_and_attention_gyms_one_key_wider(flex_problem):
    """mask_mod q_idx - kv_idx < W is our window W; attention-gym's
    q_idx - kv_idx <= W is our window W + 1."""
    x, w, q, k, v = flex_problem
    W = 2

    def ours(b, h, q_idx, kv_idx):
        return q_idx - kv_idx < W

    def gym(b, h, q_idx, kv_idx):
        return q_idx - kv_idx <= W

    for mask_mod, window in ((ours, W), (gym, W + 1)):
        out = _flex(q, k, v, mask_mod=mask_mod)
        expected, _ = reference_multi_head(x, *w, H, variant=Variant(window=window))
        assert_close(_merged(out) @ w[3], expected, "float64", mask_mod.__name__)


# transformers' layers, float64, eager attention


def _mask(window=None):
    """transformers' mask functions on the (T, T) grid, as the additive mask
    its eager attention adds: 0 where allowed, the dtype's minimum elsewhere."""
    from transformers.masking_utils import (
        causal_mask_function,
        sliding_window_causal_mask_function,
    )

    rule = (
        causal_mask_function
        if window is None
        else sliding_window_causal_mask_function(window)
    )
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    allowed = rule(0, 0, i, j)
    hidden = torch.zeros(T, T, dtype=torch.float64)
    return hidden.masked_fill(~allowed, torch.finfo(torch.float64).min)[None, None]


def _run_layer(attention, rotary, seed, window=None):
    """Seeded weights into the layer (float64), its forward on a seeded x;
    NumPy x, out, weights and the layer's (in, out) weights and biases."""
    rng = _rng(seed)
    attention = attention.double()
    params = {}
    with torch.no_grad():
        for name, p in attention.named_parameters():
            p.copy_(torch.from_numpy(0.4 * rng.standard_normal(tuple(p.shape))))
            params[name] = p.detach().numpy()
    x = torch.from_numpy(rng.standard_normal((B, T, C)))
    positions = torch.arange(T)[None].expand(B, T)
    cos, sin = rotary(x, positions)
    with torch.no_grad():
        out, weights = attention(x, (cos, sin), _mask(window))
    names = {"q": "q_proj", "k": "k_proj", "v": "v_proj"}
    names["o"] = "o_proj" if "o_proj.weight" in params else "dense"
    found = {f"w_{n}": params[f"{m}.weight"].T for n, m in names.items()}
    found |= {f"b_{n}": params.get(f"{m}.bias") for n, m in names.items()}
    return x.numpy(), out.numpy(), weights.numpy(), found, params


def _compare(layer_out, options, what):
    """The layer against the oracle: at float32's tolerance where it has
    rotary positions, whose cos and sin transformers computes in float32
    whatever the dtype; at float64's without."""
    x, out, weights, found, _ = layer_out
    w = [found[n] for n in ("w_q", "w_k", "w_v", "w_o")]
    biases = {n: found[n] for n in ("b_q", "b_k", "b_v", "b_o")}
    expected = reference_multi_head(x, *w, H, biases=biases, variant=Variant(**options))
    level = "float64" if options.get("rotary") is None else "float32"
    assert_close(out, expected[0], level, f"{what} out")
    assert_close(weights, expected[1], level, f"{what} weights")


def _config(kind, **more):
    import transformers

    base = dict(
        hidden_size=C, num_attention_heads=H, num_key_value_heads=H_KV,
        attn_implementation="eager", num_hidden_layers=2,
    )  # fmt: skip
    return getattr(transformers, f"{kind}Config")(**base, **more)


def _layer(module, kind, config):
    import importlib

    modeling = importlib.import_module(
        f"transformers.models.{module}.modeling_{module}"
    )
    attention = getattr(modeling, f"{kind}Attention")(config, 0)
    return attention, getattr(modeling, f"{kind}RotaryEmbedding")(config)


def test_llama_gqa_and_neox_rotary_equal_the_oracle():
    config = _config(
        "Llama", rope_parameters=dict(rope_type="default", rope_theta=500.0)
    )
    found = _run_layer(*_layer("llama", "Llama", config), 282)
    _compare(found, dict(n_kv_heads=H_KV, rotary=Rotary(base=500.0)), "Llama")


def test_qwen3_qk_norm_and_head_dim_equal_the_oracle():
    config = _config("Qwen3", head_dim=6, rms_norm_eps=1e-5)
    found = _run_layer(*_layer("qwen3", "Qwen3", config), 283)
    params = found[4]
    options = dict(
        n_kv_heads=H_KV, head_dim=6, rotary=Rotary(base=config.rope_parameters["rope_theta"]),
        q_norm=params["q_norm.weight"], k_norm=params["k_norm.weight"], qk_norm_eps=1e-5,
    )  # fmt: skip
    _compare(found, options, "Qwen 3")


def test_mistral_sliding_window_equals_the_oracle():
    config = _config("Mistral", sliding_window=3, head_dim=D)
    found = _run_layer(*_layer("mistral", "Mistral", config), 284, window=3)
    theta = config.rope_parameters["rope_theta"]
    _compare(
        found, dict(n_kv_heads=H_KV, rotary=Rotary(base=theta), window=3), "Mistral"
    )


def test_gemma2_soft_cap_and_window_on_alternate_layers_equal_the_oracle():
    """Soft-capping after the scale by query_pre_attn_scalar ** -0.5 (here
    9 != D: folded into w_q as sqrt(D / 9)), the window on layer 0 only."""
    config = _config(
        "Gemma2", head_dim=D, query_pre_attn_scalar=9, attn_logit_softcapping=3.0,
        sliding_window=3,
    )  # fmt: skip
    assert config.layer_types[:2] == ["sliding_attention", "full_attention"]
    found = _run_layer(*_layer("gemma2", "Gemma2", config), 285, window=3)
    found[3]["w_q"] = found[3]["w_q"] * np.sqrt(D / 9)
    theta = config.rope_parameters["rope_theta"]
    options = dict(n_kv_heads=H_KV, rotary=Rotary(base=theta), softcap=3.0, window=3)
    _compare(found, options, "Gemma 2")


def test_gpt_oss_sinks_equal_the_oracle():
    """With plain rotary positions: gpt-oss's own config scales them (YaRN),
    which docs/variants.md lists as not here."""
    config = _config(
        "GptOss", head_dim=D, sliding_window=3, num_local_experts=2,
        layer_types=["sliding_attention", "full_attention"],
        rope_parameters=dict(rope_type="default", rope_theta=150000.0),
    )  # fmt: skip
    found = _run_layer(*_layer("gpt_oss", "GptOss", config), 286, window=3)
    theta = config.rope_parameters["rope_theta"]
    options = dict(
        n_kv_heads=H_KV, rotary=Rotary(base=theta), window=3, sinks=found[4]["sinks"]
    )
    _compare(found, options, "gpt-oss")


def test_glm_gptj_rotary_on_half_the_head_equals_the_oracle():
    config = _config("Glm", head_dim=D)
    fraction = config.rope_parameters["partial_rotary_factor"]
    found = _run_layer(*_layer("glm", "Glm", config), 287)
    theta = config.rope_parameters["rope_theta"]
    rotary = Rotary(base=theta, style="gptj", fraction=fraction)
    _compare(found, dict(n_kv_heads=H_KV, rotary=rotary), "GLM")


def test_phi_neox_rotary_on_part_of_the_head_equals_the_oracle():
    config = _config("Phi", partial_rotary_factor=0.5)
    found = _run_layer(*_layer("phi", "Phi", config), 288)
    theta = config.rope_parameters["rope_theta"]
    rotary = Rotary(
        base=theta, fraction=config.rope_parameters["partial_rotary_factor"]
    )
    _compare(found, dict(n_kv_heads=H_KV, rotary=rotary), "Phi")


def test_blooms_alibi_slopes_are_ours():
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    for n_heads in (4, 6, 8, 12):
        keep = torch.ones(1, 3, dtype=torch.int64)
        bias = build_alibi_tensor(keep, n_heads, torch.float64)  # slope * j
        slopes = bias[:, 0, 1].numpy()  # key 1: the slope itself
        np.testing.assert_allclose(slopes, alibi_slopes(n_heads), rtol=1e-6)


# from_layer: our module reads the layer and its config (shared.convert)

FROM_LAYER = {
    # name: (module, class prefix, config fields, layer index, its window)
    "Llama": ("llama", "Llama", dict(rope_parameters=dict(rope_type="default", rope_theta=500.0)), 0, None),
    "Qwen 3": ("qwen3", "Qwen3", dict(head_dim=6, rms_norm_eps=1e-5), 0, None),
    "Mistral": ("mistral", "Mistral", dict(sliding_window=3, head_dim=D), 1, 3),
    "Gemma 2": ("gemma2", "Gemma2", dict(head_dim=D, query_pre_attn_scalar=9, attn_logit_softcapping=3.0, sliding_window=3), 0, 3),
    "Gemma 3": ("gemma3", "Gemma3Text", dict(head_dim=D, query_pre_attn_scalar=9, sliding_window=3, layer_types=["full_attention", "sliding_attention"]), 1, 3),
    "gpt-oss": ("gpt_oss", "GptOss", dict(head_dim=D, sliding_window=3, num_local_experts=2, attention_bias=True, layer_types=["sliding_attention", "full_attention"], rope_parameters=dict(rope_type="default", rope_theta=150000.0)), 0, 3),
}  # fmt: skip
"""The layers `from_layer` reads, each with what its config gives it: Llama
GQA and its rope_theta, Qwen 3 QK-norm and head_dim, Mistral a window on
every layer, Gemma 2 soft-capping, query_pre_attn_scalar != D and a window
on alternate layers, Gemma 3 QK-norm of (1 + weight) with
query_pre_attn_scalar and a rope_theta per layer type, gpt-oss sinks, biases
and a window."""


def _transformers_layer(name):
    import importlib

    module, prefix, fields, index, window = FROM_LAYER[name]
    config = _config(prefix, **fields)
    modeling = importlib.import_module(
        f"transformers.models.{module}.modeling_{module}"
    )
    kind = prefix.removesuffix("Text")
    attention = getattr(modeling, f"{kind}Attention")(config, index)
    rotary = getattr(modeling, f"{kind}RotaryEmbedding")(config)
    if prefix == "Gemma3Text":  # one rope_theta per layer type

        def rotary_of_layer(x, positions, rotary=rotary):
            return rotary(x, positions, config.layer_types[index])

        return attention, rotary_of_layer, window
    return attention, rotary, window


def _module_calls(backend):
    """forward(module, x) and step(module, x_t, cache): under nnx.jit in JAX
    (one compile each, where eager JAX compiles every operation)."""

    def forward(module, x):
        return module(x)

    def step(module, x_t, cache):
        return module.decode_step(x_t, cache)

    if backend.__name__ == "impl_jax":
        from flax import nnx

        return nnx.jit(forward), nnx.jit(step)
    return forward, step


@pytest.mark.every_backend
@pytest.mark.parametrize("name", list(FROM_LAYER))
def test_from_layer_reads_each_transformers_layer_and_its_config(backend, name):
    """CausalSelfAttention.from_layer(layer) equals the layer's own eager
    attention, run in float64 with the mask transformers' mask functions
    build, at float32's tolerance (transformers' rotary cos and sin, and its
    RMSNorm, are float32 whatever the dtype); decoding with the module's
    cache equals its full pass."""
    attention, rotary, window = _transformers_layer(name)
    x, out, weights, _, _ = _run_layer(attention, rotary, 290, window=window)
    module = backend.CausalSelfAttention.from_layer(attention)
    forward, step = _module_calls(backend)
    ours, our_weights = forward(module, backend.from_numpy(x))
    assert_close(backend.to_numpy(ours), out, "float32", f"{name} out")
    assert_close(backend.to_numpy(our_weights), weights, "float32", f"{name} w")
    cache = module.init_cache((B,), T)
    for t in range(T):
        out_t, cache = step(module, backend.from_numpy(x[:, t]), cache)
    assert_close(backend.to_numpy(out_t), out[:, -1], "float32", f"{name} decoding")


def test_a_layer_with_what_no_option_gives_is_one_clear_error():
    """Scaled rotary positions (gpt-oss's own YaRN, Llama 3's rope_type) are
    refused by name, not read as plain ones."""
    from shared.convert import params_from

    attention, _ = _layer("gpt_oss", "GptOss", _config("GptOss", num_local_experts=2))
    with pytest.raises(ValueError, match=r"a GptOssAttention with rope_type 'yarn' \(rope_scaling\) scales its rotary frequencies, which Rotary does not"):  # fmt: skip
        params_from(attention)
    llama3 = dict(
        rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
        high_freq_factor=4.0, original_max_position_embeddings=8192,
    )  # fmt: skip
    attention, _ = _layer("llama", "Llama", _config("Llama", rope_parameters=llama3))
    with pytest.raises(ValueError, match="LlamaAttention with rope_type 'llama3'"):
        params_from(attention)
