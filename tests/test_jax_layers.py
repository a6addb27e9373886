"""flax's nnx.MultiHeadAttention, loaded through shared.convert and
`CausalSelfAttention.from_layer`, gives the layer's own output in every backend,
with and without biases, causal and with a key-padding mask.

Asked for no weights, the layer takes jax.nn.dot_product_attention's path,
whose softmax runs in float32 even for float64 inputs (docs/differences.md,
"Dtypes"): so the float64 layer agrees with us at the float32 level."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from shared import assert_close
from shared.convert import params_from

pytestmark = pytest.mark.every_backend

B, T, C, H = 2, 6, 16, 4
LENGTHS = np.array([6, 4])


@pytest.mark.parametrize("use_bias", [True, False])
@pytest.mark.parametrize("padded", [False, True])
def test_flax_multi_head_attention(backend, use_bias, padded):
    layer = nnx.MultiHeadAttention(
        num_heads=H,
        in_features=C,
        qkv_features=C,
        out_features=C,
        use_bias=use_bias,
        decode=False,
        param_dtype=jnp.float64,
        rngs=nnx.Rngs(4),
    )
    if use_bias:  # flax starts its biases at 0: give them a size
        rng = np.random.default_rng(5)
        for dense in (layer.query, layer.key, layer.value, layer.out):
            dense.bias[...] = jnp.asarray(rng.standard_normal(dense.bias[...].shape))
    x = np.random.default_rng(0).standard_normal((B, T, C))
    keep = np.arange(T) < LENGTHS[:, None] if padded else np.ones((B, T), dtype=bool)
    causal = np.tril(np.ones((T, T), dtype=bool))
    allowed = causal[None, None] & keep[:, None, None, :]  # (B, 1, T, T), keys only
    theirs = np.asarray(layer(jnp.asarray(x), mask=jnp.asarray(allowed)))
    p = params_from(layer)
    assert (p.b_q is not None) is use_bias and p.n_heads == H
    mask = backend.from_numpy(allowed)
    args = [backend.from_numpy(a) for a in (x, *p.weights)]
    biases = {
        n: None if b is None else backend.from_numpy(b) for n, b in p.biases.items()
    }
    out, _ = backend.multi_head_attention(*args, H, mask, biases=biases)
    module_out, _ = backend.CausalSelfAttention.from_layer(layer)(args[0], mask)
    for b in range(B):
        rows = slice(0, LENGTHS[b]) if padded else slice(None)
        assert_close(backend.to_numpy(out)[b, rows], theirs[b, rows], "float32", "out")
        assert_close(
            backend.to_numpy(module_out)[b, rows], theirs[b, rows], "float32", "module"
        )
    if use_bias:
        unbiased = backend.multi_head_attention(*args, H, mask)[0]
        assert np.abs(backend.to_numpy(unbiased) - theirs).max() > 0.1


def test_flax_layers_that_are_not_ours_are_refused():
    layer = nnx.MultiHeadAttention(
        num_heads=H, in_features=C, qkv_features=8, decode=False, rngs=nnx.Rngs(0)
    )
    with pytest.raises(ValueError, match="in_features = qkv_features = out_features"):
        params_from(layer)
    layer = nnx.MultiHeadAttention(
        num_heads=H, in_features=C, normalize_qk=True, decode=False, rngs=nnx.Rngs(0)
    )
    with pytest.raises(ValueError, match="normalize_qk"):
        params_from(layer)


def test_the_flax_module_takes_every_option_away_from_its_default():
    """CausalSelfAttention(bias=True, scale=False, param_dtype=jnp.float64):
    float64 kernels and biases (set here), a forward that uses the biases and
    divides by nothing, equal to the oracle (tests/test_options.py registers
    it)."""
    from helpers import options_problem

    import impl_jax
    from shared.reference import reference_multi_head

    case = options_problem()
    module = impl_jax.CausalSelfAttention(
        8, case.H, bias=True, scale=False, param_dtype=jnp.float64, rngs=nnx.Rngs(3)
    )
    linears = (module.q_proj, module.k_proj, module.v_proj, module.out_proj)
    for linear, b in zip(linears, case.biases.values(), strict=True):
        assert linear.kernel[...].dtype == linear.bias[...].dtype == jnp.float64
        linear.bias[...] = jnp.asarray(b)
    out, weights = module(jnp.asarray(case.x))
    kernels = [np.asarray(w) for w in module.projections()]
    expected = reference_multi_head(
        case.x, *kernels, case.H, scale=False, biases=case.biases
    )
    assert_close(np.asarray(out), expected[0], "float64", "out")
    assert_close(np.asarray(weights), expected[1], "float64", "weights")
