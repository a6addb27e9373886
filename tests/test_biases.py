"""Biases everywhere the weights go: single- and multi-head attention, their
gradients, blockwise attention, KV-cache decoding and the module forms, against
the float64 oracle and each other; without them, nothing changes (the lesson,
which has none, stays bit for bit the library's: tests/test_reading_path.py)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from helpers import (
    PARAM_NAMES,
    foreign_array,
    jitted,
    name_of,
    random_inputs,
    swamped_keys,
)

from shared import assert_close
from shared.reference import reference_multi_head, reference_single_head
from shared.tolerances import FINITE_DIFFERENCE_RTOL, FINITE_DIFFERENCE_STEP

BIASES = ("b_q", "b_k", "b_v", "b_o")


def biased_problem(seed=3, batch=(2,), T=6, C=8):
    """x, the four (C, C) weights and four (C,) biases of size about 1, float64.

    (2, 6, 8) with two heads, the sizes of helpers.options_problem: eager JAX
    compiles each operation once per shape, and the tests of every option
    (tests/test_backend.py, test_backward.py) run those with biases too."""
    x, params = random_inputs(seed, batch, T, C)
    rng = np.random.default_rng(seed + 100)
    return x, params, {name: rng.standard_normal(C) for name in BIASES}


def ours(backend, arrays: dict, dtype: str) -> dict:
    """NumPy arrays (None kept) as the backend's, cast to `dtype`."""
    return {
        n: None if a is None else backend.from_numpy(a, dtype)
        for n, a in arrays.items()
    }


def test_single_head_with_biases_equals_the_oracle(backend, dtype):
    x, p, b = biased_problem()
    mask = np.random.default_rng(4).random((2, 6, 6)) < 0.7
    given = ours(backend, {"x": x, **{n: p[n] for n in ("w_q", "w_k", "w_v")}}, dtype)
    biases = ours(backend, {n: b[n] for n in ("b_q", "b_k", "b_v")}, dtype)
    out, weights = backend.single_head_attention(
        *given.values(), backend.from_numpy(mask), biases=biases
    )
    expected = reference_single_head(
        x,
        p["w_q"],
        p["w_k"],
        p["w_v"],
        mask,
        biases=dict(b_q=b["b_q"], b_k=b["b_k"], b_v=b["b_v"]),
    )
    assert_close(backend.to_numpy(out), expected[0], dtype, "out")
    assert_close(backend.to_numpy(weights), expected[1], dtype, "weights")


@pytest.mark.parametrize("which", [BIASES, ("b_q",), ("b_v", "b_o")])
def test_multi_head_with_biases_equals_the_oracle(backend, dtype, which):
    x, p, b = biased_problem()
    given = {n: b[n] for n in which}
    args = ours(backend, {"x": x, **{n: p[n] for n in PARAM_NAMES}}, dtype)
    out, weights = backend.multi_head_attention(
        *args.values(), 2, biases=ours(backend, given, dtype)
    )
    expected = reference_multi_head(x, *(p[n] for n in PARAM_NAMES), 2, biases=given)
    assert_close(backend.to_numpy(out), expected[0], dtype, "out")
    assert_close(backend.to_numpy(weights), expected[1], dtype, "weights")
    unbiased = reference_multi_head(x, *(p[n] for n in PARAM_NAMES), 2)[0]
    assert np.abs(expected[0] - unbiased).max() > 0.1  # the biases matter


def test_backends_agree_with_biases(backend_pair, dtype):
    x, p, b = biased_problem(seed=5)
    outs = []
    for backend in backend_pair:
        args = ours(backend, {"x": x, **{n: p[n] for n in PARAM_NAMES}}, dtype)
        out, _ = backend.multi_head_attention(
            *args.values(), 4, biases=ours(backend, b, dtype)
        )
        outs.append(backend.to_numpy(out))
    assert_close(outs[0], outs[1], dtype, "out")


def test_bias_gradients_equal_finite_differences_and_numpy(backend):
    """dL/db for L = sum(out * d_out), float64: every backend against central
    finite differences of the oracle, and against the hand-written NumPy one."""
    import impl_numpy

    x, p, b = biased_problem(seed=6)  # the file's sizes: (2, 6, 8), two heads
    d_out = np.random.default_rng(7).standard_normal(x.shape)
    weights = [p[n] for n in PARAM_NAMES]

    def loss(biases):
        out, _ = reference_multi_head(x, *weights, 2, biases=biases)
        return float((out * d_out).sum())

    args = ours(backend, {"x": x, **{n: p[n] for n in PARAM_NAMES}}, "float64")
    grads = backend.multi_head_attention_backward(
        *args.values(), 2, backend.from_numpy(d_out), biases=ours(backend, b, "float64")
    )
    assert list(grads) == ["x", *PARAM_NAMES, *BIASES]
    by_hand = impl_numpy.multi_head_attention_backward(x, *weights, 2, d_out, biases=b)
    h = FINITE_DIFFERENCE_STEP
    numeric = {name: np.zeros_like(b[name]) for name in BIASES}
    for name, entries in numeric.items():
        for i in range(entries.size):
            step = h * np.eye(entries.size)[i]
            up, down = {**b, name: b[name] + step}, {**b, name: b[name] - step}
            entries[i] = (loss(up) - loss(down)) / (2 * h)
    # relative to the largest entry of any bias gradient: b_k's is exactly 0 (a
    # key bias adds q . b_k to every score of a row, which the softmax ignores)
    scale = max(np.abs(entries).max() for entries in numeric.values())
    for name in BIASES:
        got = backend.to_numpy(grads[name])
        assert np.abs(got - numeric[name]).max() <= FINITE_DIFFERENCE_RTOL * scale
        assert_close(got, by_hand[name], "float64", name)
    np.testing.assert_allclose(backend.to_numpy(grads["b_k"]), 0.0, atol=1e-12)
    # d_w_o reads the merged heads, each v_j + b_v weighted: b_v shows there
    w_o = p["w_o"]
    numeric_w_o = np.zeros_like(w_o)
    for i in range(w_o.size):
        step = h * np.eye(w_o.size)[i].reshape(w_o.shape)
        up, down = [*weights[:3], w_o + step], [*weights[:3], w_o - step]
        up_out = reference_multi_head(x, *up, 2, biases=b)[0]
        down_out = reference_multi_head(x, *down, 2, biases=b)[0]
        numeric_w_o.flat[i] = ((up_out - down_out) * d_out).sum() / (2 * h)
    got = backend.to_numpy(grads["w_o"])
    assert (
        np.abs(got - numeric_w_o).max()
        <= FINITE_DIFFERENCE_RTOL * np.abs(numeric_w_o).max()
    )


def test_single_head_bias_gradients_come_only_for_the_biases_given(backend):
    x, p, b = biased_problem(seed=8)
    args = ours(
        backend, {"x": x, **{n: p[n] for n in ("w_q", "w_k", "w_v")}}, "float64"
    )
    d_out = backend.from_numpy(np.ones(x.shape))
    grads = backend.single_head_attention_backward(
        *args.values(), d_out, biases=dict(b_k=backend.from_numpy(b["b_k"]))
    )
    assert list(grads) == ["x", "w_q", "w_k", "w_v", "b_k"]
    # a key bias shifts every score of a row by the same q . b_k: no gradient
    np.testing.assert_allclose(backend.to_numpy(grads["b_k"]), 0.0, atol=1e-12)


def test_single_head_bias_gradients_equal_finite_differences(backend):
    """dL/db for L = sum(out * d_out), float64, of single-head attention: b_q
    and b_v against central finite differences of the oracle; b_k's is 0."""
    x, p, b = biased_problem(seed=14)
    b = {name: b[name] for name in ("b_q", "b_k", "b_v")}
    weights = [p[n] for n in ("w_q", "w_k", "w_v")]
    d_out = np.random.default_rng(15).standard_normal(x.shape)

    def loss(biases):
        out, _ = reference_single_head(x, *weights, biases=biases)
        return float((out * d_out).sum())

    args = ours(
        backend, {"x": x, **{n: p[n] for n in ("w_q", "w_k", "w_v")}}, "float64"
    )
    grads = backend.single_head_attention_backward(
        *args.values(), backend.from_numpy(d_out), biases=ours(backend, b, "float64")
    )
    assert list(grads) == ["x", "w_q", "w_k", "w_v", "b_q", "b_k", "b_v"]
    h = FINITE_DIFFERENCE_STEP
    for name in ("b_q", "b_v"):
        numeric = np.zeros(b[name].size)
        for i in range(numeric.size):
            step = h * np.eye(numeric.size)[i]
            up, down = {**b, name: b[name] + step}, {**b, name: b[name] - step}
            numeric[i] = (loss(up) - loss(down)) / (2 * h)
        got = backend.to_numpy(grads[name])
        scale = np.abs(numeric).max()
        assert np.abs(got - numeric).max() <= FINITE_DIFFERENCE_RTOL * scale, name
    np.testing.assert_allclose(backend.to_numpy(grads["b_k"]), 0.0, atol=1e-12)
    plain = backend.single_head_attention_backward(
        *args.values(), backend.from_numpy(d_out)
    )
    difference = backend.to_numpy(plain["x"]) - backend.to_numpy(grads["x"])
    assert np.abs(difference).max() > 1e-3  # the premise: the biases matter


def test_blockwise_and_decoding_with_biases_equal_the_full_pass(backend, dtype):
    x, p, b = biased_problem(seed=9)
    args = ours(backend, {"x": x, **{n: p[n] for n in PARAM_NAMES}}, dtype)
    biases = ours(backend, b, dtype)
    full, _ = backend.multi_head_attention(*args.values(), 2, biases=biases)
    blocks, _ = jitted(backend, "multi_head_blockwise_attention")(
        *args.values(), 2, block_size=4, biases=biases
    )
    assert_close(backend.to_numpy(blocks), backend.to_numpy(full), dtype, "blockwise")
    cache = backend.init_kv_cache((2,), 6, 8, 2, dtype)
    steps = []
    for t in range(6):
        out_t, cache = jitted(backend, "decode_step")(
            args["x"][:, t], cache, *list(args.values())[1:], 2, biases=biases
        )
        steps.append(backend.to_numpy(out_t))
    assert_close(np.stack(steps, axis=-2), backend.to_numpy(full), dtype, "decoded")


def test_a_module_built_with_biases_uses_them_in_forward_and_in_decode(backend, dtype):
    x, p, b = biased_problem(seed=10)
    weights = [p[n].astype(dtype) for n in PARAM_NAMES]
    module = backend.CausalSelfAttention.from_weights(
        *weights, 2, biases={n: a.astype(dtype) for n, a in b.items()}
    )
    for name, found in module.biases().items():  # each bias as given
        np.testing.assert_array_equal(backend.to_numpy(found), b[name].astype(dtype))
    x_ = backend.from_numpy(x, dtype)
    out, _ = module(x_)
    expected = reference_multi_head(x, *(p[n] for n in PARAM_NAMES), 2, biases=b)[0]
    assert_close(backend.to_numpy(out), expected, dtype, "module forward")
    cache = module.init_cache((2,), 6)
    steps = []
    for t in range(6):
        out_t, cache = module.decode_step(x_[:, t], cache)
        steps.append(backend.to_numpy(out_t))
    assert_close(
        np.stack(steps, axis=-2), backend.to_numpy(out), dtype, "module decode"
    )


def test_a_module_given_some_biases_has_zeros_for_the_others(backend, dtype):
    """In the weights' dtype, so that the module computes in it."""
    x, p, b = biased_problem(seed=11)
    weights = [p[n].astype(dtype) for n in PARAM_NAMES]
    module = backend.CausalSelfAttention.from_weights(
        *weights, 2, biases=dict(b_v=b["b_v"].astype(dtype))
    )
    found = {n: backend.to_numpy(a) for n, a in module.biases().items()}
    np.testing.assert_array_equal(found["b_v"], b["b_v"].astype(dtype))
    for name in ("b_q", "b_k", "b_o"):
        assert found[name].dtype == np.dtype(dtype)
        np.testing.assert_array_equal(found[name], np.zeros(8))
    out, _ = module(backend.from_numpy(x, dtype))
    assert backend.to_numpy(out).dtype == np.dtype(dtype)


@pytest.mark.parametrize(
    ("bias", "message"),
    [
        (np.ones(4), "{name} must have shape (C,) = (8,), got (4,)"),
        (np.ones((1, 8)), "{name} must have shape (C,) = (8,), got (1, 8)"),
        (
            np.ones(8, dtype=np.float32),
            "x has dtype float64 but {name} has dtype float32; give x, the weights "
            "and the biases one dtype",
        ),
    ],
)
def test_a_bad_bias_is_one_message_in_every_backend(backend, bias, message):
    x, p, _ = biased_problem()
    args = [backend.from_numpy(a) for a in (x, *(p[n] for n in PARAM_NAMES))]
    cache = backend.init_kv_cache((2,), 6, 8, 2, "float64")
    calls = (
        lambda given: backend.multi_head_attention(*args, 2, biases=given),
        lambda given: backend.multi_head_blockwise_attention(*args, 2, biases=given),
        lambda given: backend.multi_head_attention_backward(
            *args, 2, args[0], biases=given
        ),
        lambda given: backend.decode_step(
            args[0][:, 0], cache, *args[1:], 2, biases=given
        ),
    )
    for name in BIASES:
        for call in calls:
            with pytest.raises(ValueError) as raised:
                call({name: backend.from_numpy(bias)})
            assert str(raised.value) == message.format(name=name)
    for name in ("b_q", "b_k", "b_v"):
        for call in (
            backend.single_head_attention,
            lambda *a, biases: backend.single_head_attention_backward(
                *a, args[0], biases=biases
            ),
        ):
            with pytest.raises(ValueError) as raised:
                call(*args[:4], biases={name: backend.from_numpy(np.ones(3))})
            assert str(raised.value) == f"{name} must have shape (D,) = (8,), got (3,)"


def test_a_key_bias_that_swamps_every_key_makes_every_row_attend_uniformly(
    backend, dtype
):
    """b_k reaches the keys in every form, although a key bias that does not
    swamp them changes no output (it adds q . b_k to a whole row of scores):
    helpers.swamped_keys."""
    x, p, b, expected = swamped_keys(13, (2,), 6, 8, 2)
    args = ours(backend, {"x": x, **{n: p[n] for n in PARAM_NAMES}}, dtype)
    biases = ours(backend, b, dtype)
    out, weights = backend.multi_head_attention(*args.values(), 2, biases=biases)
    causal = np.tril(np.ones((6, 6)))
    uniform = np.broadcast_to(causal / causal.sum(-1, keepdims=True), (2, 2, 6, 6))
    assert_close(backend.to_numpy(weights), uniform, dtype, "weights")
    assert_close(backend.to_numpy(out), expected, dtype, "out")
    blocks, _ = jitted(backend, "multi_head_blockwise_attention")(
        *args.values(), 2, block_size=4, biases=biases
    )
    assert_close(backend.to_numpy(blocks), expected, dtype, "blockwise")
    cache = backend.init_kv_cache((2,), 6, 8, 2, dtype)
    steps = []
    for t in range(6):
        out_t, cache = jitted(backend, "decode_step")(
            args["x"][:, t], cache, *list(args.values())[1:], 2, biases=biases
        )
        steps.append(backend.to_numpy(out_t))
    assert_close(np.stack(steps, axis=-2), expected, dtype, "decoded")
    x, p, b, _ = swamped_keys(14, (2,), 6, 8, 1)  # one head: D = C
    names = ("w_q", "w_k", "w_v", "b_q", "b_k", "b_v")
    out, weights = backend.single_head_attention(
        backend.from_numpy(x, dtype),
        *ours(backend, {n: p[n] for n in names[:3]}, dtype).values(),
        biases=ours(backend, {n: b[n] for n in names[3:]}, dtype),
    )
    assert_close(backend.to_numpy(weights), uniform[:, 0], dtype, "single weights")
    expected = reference_single_head(
        x, *(p[n] for n in names[:3]), biases={n: b[n] for n in names[3:]}
    )[0]
    assert_close(backend.to_numpy(out), expected, dtype, "single out")


class Linear:  # a module-like object: callable, no .shape
    def __call__(self, x):
        return x


class CallableArray(Linear):  # an array of no framework we know that is callable
    shape = (8, 8)
    dtype = np.dtype("float64")


FROM_LAYER = (
    ": to load another library's layer, use CausalSelfAttention.from_layer(layer)"
)
LAYOUT = " in the (in, out) layout (to_numpy converts a framework's array)"


@pytest.mark.parametrize(
    ("given", "hint"),
    [(Linear(), FROM_LAYER), (CallableArray(), LAYOUT)],
    ids=["a layer", "a callable with a .shape"],
)
def test_from_weights_given_no_numpy_array_says_what_to_give(backend, given, hint):
    """A layer (callable, no .shape) is told to use from_layer; anything else,
    even callable, if it has a .shape, is told the layout and the converter
    (a list: the bad-input matrix)."""
    _, p, _ = biased_problem()
    with pytest.raises(TypeError) as raised:
        backend.CausalSelfAttention.from_weights(
            given, *(p[n] for n in PARAM_NAMES[1:]), 2
        )
    name = type(given).__name__
    assert str(raised.value) == f"from_weights takes NumPy arrays; w_q is {name}{hint}"


@pytest.mark.parametrize("scale", [True, False], ids=["scaled", "unscaled"])
def test_from_layer_takes_the_parameters_of_a_gpt2_like_layer(backend, scale):
    """shared.convert.params_from reads a layer by its attributes: here those
    of transformers' GPT2Attention (c_attn a Conv1D, (in, out), with nf) with
    float32 NumPy arrays, so no torch is needed; the module computes in the
    layer's dtype, with its biases, heads and scale."""
    x, p, b = biased_problem(seed=16)
    p = {n: w.astype(np.float32) for n, w in p.items()}
    b = {n: a.astype(np.float32) for n, a in b.items()}
    qkv = [p[n] for n in ("w_q", "w_k", "w_v")]
    layer = SimpleNamespace(
        c_attn=SimpleNamespace(
            nf=24,
            weight=np.concatenate(qkv, axis=1),
            bias=np.concatenate([b[n] for n in ("b_q", "b_k", "b_v")]),
        ),
        c_proj=SimpleNamespace(weight=p["w_o"], bias=b["b_o"]),
        num_heads=2,
        scale_attn_weights=scale,
    )
    module = backend.CausalSelfAttention.from_layer(layer)
    out, _ = module(backend.from_numpy(x, "float32"))
    out = backend.to_numpy(out)
    assert out.dtype == np.float32
    x32 = x.astype(np.float32).astype(np.float64)
    widened = {n: a.astype(np.float64) for n, a in {**p, **b}.items()}
    weights = [widened.pop(n) for n in PARAM_NAMES]
    expected, _ = reference_multi_head(x32, *weights, 2, scale=scale, biases=widened)
    assert_close(out, expected, "float32", "the module of a GPT-2-like layer")


def test_arrays_of_another_framework_are_refused_before_any_compute(backend_pair):
    """One policy: each backend computes on its own arrays (JAX on NumPy arrays
    too), and names the converter for any other; every argument is checked."""
    x, p, b = biased_problem()
    mask = np.ones((2, 2, 6, 6), dtype=bool)
    for host, guest in (backend_pair, backend_pair[::-1]):
        if name_of(host) == "jax" and name_of(guest) == "numpy":
            continue  # JAX takes NumPy arrays, as jax.numpy does
        own = {n: host.from_numpy(a) for n, a in {"x": x, **p, **b}.items()}
        own["mask"] = host.from_numpy(mask)
        for name in ("x", *PARAM_NAMES, *BIASES, "mask"):
            args = dict(own)
            source = mask if name == "mask" else {"x": x, **p, **b}[name]
            args[name] = guest.from_numpy(source)
            with pytest.raises(TypeError) as raised:
                host.multi_head_attention(
                    args["x"],
                    *(args[n] for n in PARAM_NAMES),
                    2,
                    args["mask"],
                    biases={n: args[n] for n in BIASES},
                )
            message = str(raised.value)
            assert (
                message.startswith(f"{name} is a ")
                and f"impl_{name_of(host)} computes on" in message
            )
            assert "convert it with impl_" in message


def test_every_function_refuses_an_x_of_another_framework(backend_pair):
    """The policy holds in every function that computes, not only attention."""
    x, p, _ = biased_problem(seed=12, batch=(), T=4, C=8)
    for host, guest in (backend_pair, backend_pair[::-1]):
        if name_of(host) == "jax" and name_of(guest) == "numpy":
            continue
        for function, call in calls_on_x(host, x, p).items():
            with pytest.raises(TypeError, match="convert it with impl_") as raised:
                call(guest.from_numpy(x))
            assert f"but impl_{name_of(host)} computes on" in str(raised.value), (
                function
            )


def calls_on_x(host, x, p):
    """Every computing function of `host`, as a function of x alone."""
    w = [host.from_numpy(p[n]) for n in PARAM_NAMES]
    d_out = host.from_numpy(x)
    cache = host.init_kv_cache((), 4, 8, 2, "float64")
    return {
        "single_head_attention": lambda a: host.single_head_attention(a, *w[:3]),
        "single_head_attention_backward": lambda a: host.single_head_attention_backward(
            a, *w[:3], d_out
        ),
        "multi_head_attention_backward": lambda a: host.multi_head_attention_backward(
            a, *w, 2, d_out
        ),
        "multi_head_blockwise_attention": lambda a: host.multi_head_blockwise_attention(
            a, *w, 2
        ),
        "blockwise_attention": lambda a: host.blockwise_attention(a, a, a),
        "decode_step": lambda a: host.decode_step(a[0], cache, *w, 2),
        "attention_entropy": lambda a: host.attention_entropy(a),
    }


def test_an_array_of_another_framework_is_told_by_its_type_alone(backend):
    """framework_of reads an array's type only (docs/layers.md): a stand-in of
    another framework is refused in every function that computes, as that
    framework's arrays are, also where that framework is not installed."""
    x, p, _ = biased_problem(seed=12, batch=(), T=4, C=8)
    host = name_of(backend)
    stand_in = foreign_array(x, host)
    kind = "a JAX array" if host == "torch" else "a torch tensor"
    w = [backend.from_numpy(p[n]) for n in PARAM_NAMES]
    x_ = backend.from_numpy(x)
    calls = {
        **calls_on_x(backend, x, p),
        "multi_head_attention": lambda a: backend.multi_head_attention(a, *w, 2),
        "single_head_attention_backward, d_out": lambda a: (
            backend.single_head_attention_backward(x_, *w[:3], a)
        ),
        "multi_head_attention_backward, d_out": lambda a: (
            backend.multi_head_attention_backward(x_, *w, 2, a)
        ),
        "key_padding_mask": lambda a: backend.key_padding_mask(a[:, 0], 4),
    }
    for function, call in calls.items():
        with pytest.raises(TypeError) as raised:
            call(stand_in)
        assert f"is {kind}, but impl_{host} computes on" in str(raised.value), function
