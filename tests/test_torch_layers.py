"""Other libraries' torch attention layers, loaded through shared.convert and
`CausalSelfAttention.from_layer`, give the layer's own output (and its weights
where it returns them) in every backend: torch's nn.MultiheadAttention,
transformers' GPT2Attention and a nanoGPT-style CausalSelfAttention, with and
without biases, causal and with a key-padding mask. Each layer is built with
random weights here: nothing is downloaded."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers import name_of
from torch import nn

from shared import assert_close
from shared.convert import params_from

pytestmark = pytest.mark.every_backend

B, T, C, H = 2, 6, 16, 4
LENGTHS = np.array([6, 4])  # item 1: two padded keys


class NanoGPTAttention(nn.Module):
    """nanoGPT's CausalSelfAttention, written out as nanoGPT writes it (its
    names: c_attn packs q, k, v; n_head), without dropout."""

    def __init__(self, n_embd, n_head, bias):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.n_head, self.n_embd = n_head, n_embd

    def forward(self, x, keep=None):
        Bx, Tx, Cx = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (
            t.view(Bx, Tx, self.n_head, Cx // self.n_head).transpose(1, 2)
            for t in (q, k, v)
        )
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        allowed = torch.ones(Tx, Tx, dtype=torch.bool).tril()
        if keep is not None:
            allowed = allowed & keep[:, None, None, :]
        att = att.masked_fill(~allowed, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(Bx, Tx, Cx)
        return self.c_proj(y), att


def x_and_keep():
    rng = np.random.default_rng(0)
    return rng.standard_normal((B, T, C)), np.arange(T) < LENGTHS[:, None]


def run_ours(backend, layer, x, keep=None):
    """Our functions, and our module from_layer, on the layer's parameters."""
    p = params_from(layer)
    mask = None if keep is None else backend.from_numpy(keep[:, None, None, :])
    args = [backend.from_numpy(a) for a in (x, *p.weights)]
    biases = {
        n: None if b is None else backend.from_numpy(b) for n, b in p.biases.items()
    }
    out, weights = backend.multi_head_attention(
        *args, p.n_heads, mask, scale=p.scale, biases=biases
    )
    module = backend.CausalSelfAttention.from_layer(layer)
    module_out, _ = module(backend.from_numpy(x), mask)
    return (
        backend.to_numpy(out),
        backend.to_numpy(weights),
        backend.to_numpy(module_out),
    )


def assert_like_the_layer(out, weights, module_out, theirs, their_weights, keep):
    """Our functions' output and weights, and our module's output, equal the
    layer's on the real positions (a padded query's output is ignored)."""
    for b in range(B):
        rows = slice(None) if keep is None else slice(0, LENGTHS[b])
        assert_close(out[b, rows], theirs[b, rows], "float64", "out")
        assert_close(module_out[b, rows], theirs[b, rows], "float64", "module out")
        assert_close(weights[b, :, rows], their_weights[b, :, rows], "float64", "w")


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("padded", [False, True])
def test_multihead_attention(backend, bias, batch_first, padded):
    torch.manual_seed(1)
    layer = nn.MultiheadAttention(C, H, bias=bias, batch_first=batch_first)
    layer = layer.double().eval()
    x, keep = x_and_keep()
    keep = keep if padded else None
    xt = torch.from_numpy(x) if batch_first else torch.from_numpy(x).transpose(0, 1)
    causal = torch.ones(T, T, dtype=torch.bool).triu(1)  # True = may NOT attend
    padding = None if keep is None else torch.from_numpy(~keep)
    theirs, their_weights = layer(
        xt,
        xt,
        xt,
        attn_mask=causal,
        key_padding_mask=padding,
        need_weights=True,
        average_attn_weights=False,
    )
    theirs = theirs.detach().numpy()
    theirs = theirs if batch_first else theirs.transpose(1, 0, 2)
    out, weights, module_out = run_ours(backend, layer, x, keep)
    their_weights = their_weights.detach().numpy()
    assert_like_the_layer(out, weights, module_out, theirs, their_weights, keep)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("padded", [False, True])
def test_nanogpt_causal_self_attention(backend, bias, padded):
    torch.manual_seed(2)
    layer = NanoGPTAttention(C, H, bias).double().eval()
    x, keep = x_and_keep()
    keep = keep if padded else None
    with torch.no_grad():
        theirs, their_weights = layer(
            torch.from_numpy(x), None if keep is None else torch.from_numpy(keep)
        )
    out, weights, module_out = run_ours(backend, layer, x, keep)
    assert_like_the_layer(
        out, weights, module_out, theirs.numpy(), their_weights.numpy(), keep
    )


@pytest.mark.parametrize("padded", [False, True])
def test_gpt2_attention(backend, padded):
    """transformers' GPT2Attention with its biases; alone it does not mask the
    future (GPT2Model builds the mask), so it gets an additive causal mask."""
    from transformers import GPT2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2Attention

    config = GPT2Config(
        n_embd=C,
        n_head=H,
        n_layer=1,
        n_positions=T,
        vocab_size=8,
        attn_implementation="eager",
    )
    torch.manual_seed(3)
    layer = GPT2Attention(config, layer_idx=0).double().eval()
    with torch.no_grad():
        for parameter in layer.parameters():  # biases of size 1, not GPT-2's 0
            parameter.normal_(0.0, 1.0 / math.sqrt(C))
    x, keep = x_and_keep()
    keep = keep if padded else None
    allowed = np.tril(np.ones((T, T), dtype=bool))[None, None]
    if keep is not None:
        allowed = allowed & keep[:, None, None, :]
    additive = torch.from_numpy(np.where(allowed, 0.0, -np.inf))
    with torch.no_grad():
        theirs, their_weights = layer(
            torch.from_numpy(x), attention_mask=additive, output_attentions=True
        )
    out, weights, module_out = run_ours(backend, layer, x, keep)
    assert params_from(layer).b_q is not None
    assert_like_the_layer(
        out, weights, module_out, theirs.numpy(), their_weights.numpy(), keep
    )


def test_the_torch_module_from_layer_keeps_the_layers_dtype(backend):
    layer = nn.MultiheadAttention(C, H).float()
    module = backend.CausalSelfAttention.from_layer(layer)
    out, _ = module(backend.from_numpy(x_and_keep()[0], "float32"))
    assert str(backend.to_numpy(out).dtype) == "float32"
    if name_of(backend) == "torch":
        assert module.q_proj.bias is not None


def test_layers_that_are_not_causal_self_attention_are_refused():
    with pytest.raises(ValueError, match="cross-attention, not self-attention"):
        params_from(nn.MultiheadAttention(C, H, kdim=8, vdim=8))
    with pytest.raises(ValueError, match="add_bias_kv or add_zero_attn"):
        params_from(nn.MultiheadAttention(C, H, add_bias_kv=True))
    with pytest.raises(TypeError) as raised:
        params_from(nn.Linear(C, C))
    assert str(raised.value) == (
        "params_from takes a torch nn.MultiheadAttention, a transformers "
        "GPT2Attention, a nanoGPT-style CausalSelfAttention (c_attn, c_proj and "
        "n_head), a flax nnx.MultiHeadAttention or a transformers LlamaAttention, "
        "MistralAttention, Qwen2Attention, Qwen3Attention, Gemma2Attention, "
        "Gemma3Attention, GptOssAttention; got Linear"
    )


def test_a_layer_swapped_for_a_biased_one_counts_in_forward_and_decode():
    """Forward and decode_step read the module's Linear layers at every call,
    so they never disagree about a bias."""
    import impl_torch

    module = impl_torch.CausalSelfAttention(C, H, dtype=torch.float64)
    biased = nn.Linear(C, C, bias=True, dtype=torch.float64)
    with torch.no_grad():
        biased.weight.copy_(module.v_proj.weight)
        biased.bias.normal_()
    module.v_proj = biased
    x = torch.from_numpy(x_and_keep()[0][0])
    out, _ = module(x)
    cache = module.init_cache((), T)
    steps = []
    for t in range(T):
        out_t, cache = module.decode_step(x[t], cache)
        steps.append(out_t)
    assert_close(torch.stack(steps).numpy(), out.detach().numpy(), "float64", "decode")
    unbiased = impl_torch.multi_head_attention(x, *module.projections(), H)[0]
    assert (out - unbiased).abs().max() > 0.1


# Every option away from its default (tests/test_options.py registers them).
# device: a CPU-only machine has two devices, "cpu" and "meta" (shapes, no
# numbers). Under a default device of "meta", device="cpu" must put every
# parameter on the CPU, with the oracle's numbers; from_weights and from_layer
# stage their NumPy arrays on the default device, so they are asked for
# device="meta" under the CPU default instead, and for their numbers on "cpu".


def _oracle_of(module, case):
    """The oracle's float64 output for the module's own parameters."""
    from shared.reference import reference_multi_head

    weights = [w.detach().numpy() for w in module.projections()]
    biases = {n: b.detach().numpy() for n, b in module.biases().items()}
    out, _ = reference_multi_head(
        case.x, *weights, case.H, scale=module.scale, biases=biases
    )
    return out


def test_the_torch_module_takes_every_option_away_from_its_default():
    """CausalSelfAttention(bias=True, scale=False, device=..., dtype=torch.float64),
    from_weights(scale=False, b_q=..., device=...) and from_layer(device=...):
    float64 on the device asked for, equal to the oracle."""
    from helpers import options_problem

    import impl_torch

    case = options_problem()
    layer = nn.MultiheadAttention(8, case.H, batch_first=True, dtype=torch.float64)
    with torch.device("meta"):
        built = impl_torch.CausalSelfAttention(
            8, case.H, bias=True, scale=False, device="cpu", dtype=torch.float64
        )
    from_weights = impl_torch.CausalSelfAttention.from_weights
    loaded = from_weights(
        *case.params.values(), case.H, scale=False, device="cpu", biases=case.biases
    )
    converted = impl_torch.CausalSelfAttention.from_layer(layer, device="cpu")
    x = torch.from_numpy(case.x)
    for name, module in (("built", built), ("loaded", loaded), ("layer", converted)):
        for p in module.parameters():
            assert p.device.type == "cpu" and p.dtype == torch.float64, name
        assert all(b is not None for b in module.biases().values()), name
        out, _ = module(x)
        assert_close(out.detach().numpy(), _oracle_of(module, case), "float64", name)
    assert built.scale is False and converted.scale is True
    held = [w.detach().numpy() for w in loaded.projections()]
    for w, expected in zip(held, case.params.values(), strict=True):
        np.testing.assert_array_equal(w, expected)
    for b, expected in zip(loaded.biases().values(), case.biases.values(), strict=True):
        np.testing.assert_array_equal(b.detach().numpy(), expected)
    on_meta = [
        from_weights(*case.params.values(), case.H, device="meta", biases=case.biases),
        impl_torch.CausalSelfAttention.from_layer(layer, device="meta"),
    ]
    for module in on_meta:
        assert {p.device.type for p in module.parameters()} == {"meta"}
