"""The backward pass, once per backend (parametrized by `backend`) and across
every pair (`backend_pair`): finite differences, the float64 NumPy backward as
the reference, causality through gradients, fully masked rows, bad input.

Every gradient here is of L = sum(out * d_out) for a seeded d_out; see
`shared.gradients.backend_gradients`, which runs a backend on NumPy inputs.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import (
    PARAM_NAMES,
    ShapeOnly,
    gradient_case,
    gradient_tolerances,
    name_of,
    per_process_cache,
    run_multi,
    run_single,
)

import impl_numpy
from shared import PRESETS, assert_close
from shared.dtypes import dtype_name
from shared.gradients import FORMS, GRAD_NAMES, backend_gradients
from shared.tolerances import FINITE_DIFFERENCE_RTOL, FINITE_DIFFERENCE_STEP


def _rows_masked_mask(T=8, rows=(5,)):
    """A (T, T) mask that leaves row 0 (key 0 masked) and `rows` nothing to attend."""
    mask = np.ones((T, T), dtype=bool)
    mask[:, 0] = False  # row 0 may only attend key 0: now nothing
    mask[list(rows), :] = False
    return mask


# 1. Central finite differences of the float64 forward (impl_numpy's), against
# every backend's backward. "every entry": each entry of each gradient is
# checked; a number: that many entries per gradient, drawn with a seeded rng.

# Every entry on the plain case; the cases that change one thing (no scale,
# rows with nothing to attend) on 200 of each gradient's entries, 1,000 of the
# multi-head form's 4,352 (two forwards each): a wrong scale or mask moves
# most entries, and each backend's env computes these differences again.
FD_CASES = {
    "tiny, every entry": dict(preset="tiny", entries=None),
    "tiny, scale=False, 200 random entries": dict(
        preset="tiny", entries=200, scale=False
    ),
    "tiny, rows 0 and 5 fully masked, 200 random entries": dict(
        preset="tiny", entries=200, mask=_rows_masked_mask()
    ),
    "batched, 200 random entries": dict(preset="batched", entries=200),
}


def _forward_out(form, inputs, n_heads, mask, scale):
    """impl_numpy's float64 forward output on a dict of inputs."""
    if form == "single":
        return impl_numpy.single_head_attention(**inputs, mask=mask, scale=scale)[0]
    return impl_numpy.multi_head_attention(
        **inputs, n_heads=n_heads, mask=mask, scale=scale
    )[0]


@per_process_cache
def _finite_differences(case, form):
    """{name: (flat indices, dL/d entry)} by central differences, float64."""
    spec = FD_CASES[case]
    x, params, n_heads, d_out = gradient_case(spec["preset"])
    mask, scale = spec.get("mask"), spec.get("scale", True)
    inputs = {"x": x, **{k: params[k] for k in GRAD_NAMES[form] if k != "x"}}
    rng = np.random.default_rng(0)
    h = FINITE_DIFFERENCE_STEP
    found = {}
    for name in GRAD_NAMES[form]:
        size = inputs[name].size
        if spec["entries"] is None:
            indices = np.arange(size)
        else:
            indices = rng.choice(size, spec["entries"], replace=False)
        values = np.empty(len(indices))
        for n, index in enumerate(indices):
            plus = {k: a.copy() for k, a in inputs.items()}
            minus = {k: a.copy() for k, a in inputs.items()}
            plus[name].flat[index] += h
            minus[name].flat[index] -= h
            out_plus = _forward_out(form, plus, n_heads, mask, scale)
            out_minus = _forward_out(form, minus, n_heads, mask, scale)
            values[n] = np.sum((out_plus - out_minus) * d_out) / (2 * h)
        found[name] = (indices, values)
    return found


def _relative_error(grad, indices, expected):
    """Largest |grad - expected| over the checked entries / largest |expected|."""
    return np.max(np.abs(grad.flat[indices] - expected)) / np.max(np.abs(expected))


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("case", FD_CASES)
def test_backward_equals_finite_differences(backend, case, form):
    spec = FD_CASES[case]
    x, params, n_heads, d_out = gradient_case(spec["preset"])
    grads = backend_gradients(
        backend,
        form,
        x,
        params,
        n_heads,
        d_out,
        "float64",
        spec.get("mask"),
        scale=spec.get("scale", True),
        jitted=True,
    )
    for name, (indices, expected) in _finite_differences(case, form).items():
        error = _relative_error(grads[name], indices, expected)
        assert error < FINITE_DIFFERENCE_RTOL, f"{name_of(backend)} d_{name}: {error}"


def test_finite_differences_catch_a_missing_scale():
    """The check has teeth: the gradient of the unscaled scores is not the
    gradient of the scaled ones, by far more than the tolerance."""
    x, params, n_heads, d_out = gradient_case("tiny")
    wrong = backend_gradients(
        impl_numpy, "single", x, params, n_heads, d_out, "float64", scale=False
    )
    indices, expected = _finite_differences("tiny, every entry", "single")["w_q"]
    assert _relative_error(wrong["w_q"], indices, expected) > 1e-2


@pytest.mark.parametrize("form", FORMS)
def test_the_backward_scales_by_default_as_the_forward_does(backend, form):
    x, params, n_heads, d_out = gradient_case("tiny")
    x, d_out = backend.from_numpy(x), backend.from_numpy(d_out)
    w = [backend.from_numpy(params[name]) for name in PARAM_NAMES]

    def backward(**scale):  # no scale given: the default
        if form == "single":
            grads = backend.single_head_attention_backward(x, *w[:3], d_out, **scale)
        else:
            grads = backend.multi_head_attention_backward(
                x, *w, n_heads, d_out, **scale
            )
        return {name: backend.to_numpy(grad) for name, grad in grads.items()}

    default, scaled, unscaled = backward(), backward(scale=True), backward(scale=False)
    for name, grad in default.items():
        np.testing.assert_array_equal(grad, scaled[name], err_msg=name)
    assert not np.allclose(default["w_q"], unscaled["w_q"])  # scale matters here


# 2. Every backend equals the float64 NumPy backward, and every pair agrees,
# within the tolerance derived on each preset (the table is the floor; a
# gradient sums over every position, which the table's problems do not cover:
# docs/suite.md). JAX runs its jitted backward here, one compile per preset
# where eager JAX compiles each operation; its eager backward equals the jitted
# one (tests/test_jax_backward.py) and finite differences (1. above).


@per_process_cache
def _reference(preset, form):
    """The float64 NumPy backward: the reference gradients."""
    return backend_gradients(impl_numpy, form, *gradient_case(preset), "float64")


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("preset", PRESETS)
def test_gradients_equal_the_float64_reference(backend, dtype, preset, form):
    case = gradient_case(preset)
    grads = backend_gradients(backend, form, *case, dtype, jitted=True)
    tolerances = gradient_tolerances(preset, form, dtype)
    for name, expected in _reference(preset, form).items():
        assert np.all(np.isfinite(grads[name]))
        what = f"{name_of(backend)} d_{name}"
        assert_close(grads[name], expected, tolerances[name], what)


@per_process_cache
def _gradients_of(backend, form, preset, dtype):
    """A backend's gradients on a preset, computed once for the pairs it is in
    (numpy-torch and numpy-jax compare the same NumPy gradients)."""
    return backend_gradients(backend, form, *gradient_case(preset), dtype, jitted=True)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("preset", PRESETS)
def test_backends_agree_on_gradients(backend_pair, dtype, preset, form):
    a, b = backend_pair
    grads_a = _gradients_of(a, form, preset, dtype)
    grads_b = _gradients_of(b, form, preset, dtype)
    tolerances = gradient_tolerances(preset, form, dtype)
    for name in GRAD_NAMES[form]:
        assert_close(
            grads_a[name],
            grads_b[name],
            tolerances[name],
            f"{name_of(a)} vs {name_of(b)}: d_{name}",
        )


# 3. Causality through gradients: d out[i] / d x[j] is exactly zero for j > i.


def _jacobian_wrt_x(backend, form, dtype, mask=None):
    """d out[i, c] / d x[j, c'] as (T, D_out, T, C), from one batched backward
    call: batch item (i, c) of a broadcast x gets the one-hot d_out[i, c] = 1."""
    x, params, n_heads, _ = gradient_case("tiny")
    T, C = x.shape
    D_out = C  # the fixture's projections are (C, C): out is (T, C) in both forms
    x_batch = np.broadcast_to(x, (T * D_out, T, C))  # (T·D_out, T, C)
    one_hot = np.eye(T * D_out).reshape(T * D_out, T, D_out)  # (T·D_out, T, D_out)
    grads = backend_gradients(
        backend, form, x_batch, params, n_heads, one_hot, dtype, mask, jitted=True
    )
    return grads["x"].reshape(T, D_out, T, C)  # (T, D_out, T, C)


@pytest.mark.parametrize("form", FORMS)
def test_no_gradient_flows_from_the_future(backend, dtype, form):
    jacobian = _jacobian_wrt_x(backend, form, dtype)
    T = jacobian.shape[0]
    for i in range(T):
        for j in range(T):
            block = jacobian[i, :, j, :]  # d out[i] / d x[j]
            if j > i:
                assert np.all(block == 0), f"d out[{i}] / d x[{j}] is not exactly 0"
            else:
                assert np.any(block != 0), f"d out[{i}] / d x[{j}] is all 0"


def test_one_hot_jacobian_is_the_reference_jacobian(backend, dtype):
    """The batched one-hot Jacobian of the causality test is the real one: it
    equals the float64 NumPy Jacobian entry by entry."""
    expected = _jacobian_wrt_x(impl_numpy, "multi", "float64")
    # the x-gradient's tolerance on the same preset (docs/suite.md)
    tolerance = gradient_tolerances("tiny", "multi", dtype)["x"]
    assert_close(_jacobian_wrt_x(backend, "multi", dtype), expected, tolerance)


# 4. Masked positions: no NaN, and a fully masked row contributes nothing.


@pytest.mark.parametrize("form", FORMS)
def test_fully_masked_rows_give_finite_gradients_and_ignore_their_d_out(
    backend, dtype, form
):
    x, params, n_heads, d_out = gradient_case("tiny")
    mask = _rows_masked_mask(rows=(5,))
    # the mask really leaves rows 0 and 5 with nothing to attend to
    if form == "single":
        _, weights = run_single(
            impl_numpy, x, params["w_q"], params["w_k"], params["w_v"], "float64", mask
        )
    else:
        _, weights = run_multi(impl_numpy, x, params, n_heads, "float64", mask)
    T = x.shape[-2]
    empty = np.all(weights == 0, axis=-1).reshape(-1, T).all(axis=0)  # (T,)
    assert list(np.flatnonzero(empty)) == [0, 5]
    grads = backend_gradients(
        backend, form, x, params, n_heads, d_out, dtype, mask, jitted=True
    )
    for name, grad in grads.items():
        assert np.all(np.isfinite(grad)), f"d_{name} has NaN or Inf"
    # A fully masked row's output is the constant 0: its d_out changes nothing,
    # bit for bit (its products are exact zeros).
    other_d_out = d_out.copy()
    other_d_out[[0, 5]] = 1e3 * np.random.default_rng(7).standard_normal((2, 32))
    other = backend_gradients(
        backend, form, x, params, n_heads, other_d_out, dtype, mask, jitted=True
    )
    for name in grads:
        np.testing.assert_array_equal(other[name], grads[name], err_msg=name)


def test_gradients_follow_the_dtype_of_x_in_every_dtype(backend):
    x, params, n_heads, d_out = gradient_case("tiny")
    for dtype in ("float64", "float32", "float16", "bfloat16"):
        x_in, d_out_in = backend.from_numpy(x, dtype), backend.from_numpy(d_out, dtype)
        w = {k: backend.from_numpy(params[k], dtype) for k in PARAM_NAMES}
        single = backend.single_head_attention_backward(
            x_in, w["w_q"], w["w_k"], w["w_v"], d_out_in
        )
        multi = backend.multi_head_attention_backward(
            x_in, *w.values(), n_heads, d_out_in
        )
        for form, grads in (("single", single), ("multi", multi)):
            assert tuple(grads) == GRAD_NAMES[form]
            for name, grad in grads.items():
                assert dtype_name(grad) == dtype, (form, name, dtype)
                expected = x.shape if name == "x" else params[name].shape
                assert tuple(grad.shape) == expected
                assert np.all(np.isfinite(backend.to_numpy(grad).astype(np.float64)))


# Bad input: the forward's validation, plus d_out. Same error and message in
# every backend, raised before any compute.


def _bad_case(form, d_out=None, n_heads=4, mask=None, x_dtype="float64"):
    """x (2, 5, 8), projections (8, 8); d_out defaults to the right shape."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 8)).astype(x_dtype)
    params = {k: rng.standard_normal((8, 8)).astype(x_dtype) for k in PARAM_NAMES}
    d_out = np.zeros((2, 5, 8), dtype=x_dtype) if d_out is None else d_out
    return form, x, params, n_heads, d_out, mask


BAD_CASES = {
    "single: d_out of the wrong width": (
        _bad_case("single", d_out=np.zeros((2, 5, 4))),
        ValueError,
        "d_out must have the shape of out, (..., T, D) = (2, 5, 8), got (2, 5, 4)",
    ),
    "single: d_out without the batch axis": (
        _bad_case("single", d_out=np.zeros((5, 8))),
        ValueError,
        "d_out must have the shape of out, (..., T, D) = (2, 5, 8), got (5, 8)",
    ),
    "multi: d_out of the wrong length": (
        _bad_case("multi", d_out=np.zeros((2, 6, 8))),
        ValueError,
        "d_out must have the shape of out, (..., T, C) = (2, 5, 8), got (2, 6, 8)",
    ),
    "multi: d_out of another dtype": (
        _bad_case("multi", d_out=np.zeros((2, 5, 8), dtype=np.float32)),
        ValueError,
        "x has dtype float64 but d_out has dtype float32; give x and d_out one dtype",
    ),
    "multi: d_out not an array": (
        _bad_case("multi", d_out=[[0.0] * 8] * 5),
        TypeError,
        "d_out must be an array with .shape and .dtype, got list",
    ),
    "multi: the forward's check comes first": (
        _bad_case("multi", n_heads=3, d_out=np.zeros((1,))),
        ValueError,
        "n_heads=3 does not divide d_model=8",
    ),
    "single: mask of the wrong shape": (
        _bad_case("single", mask=np.ones((4, 4), dtype=bool)),
        ValueError,
        "mask of shape (4, 4) does not broadcast to (..., T, T) = (2, 5, 5)",
    ),
    "multi: mask without the head axis": (
        _bad_case("multi", mask=np.ones((2, 5, 5), dtype=bool)),
        ValueError,
        "mask of shape (2, 5, 5) does not broadcast to (..., H, T, T) = (2, 4, 5, 5)",
    ),
}


@pytest.mark.parametrize("case", BAD_CASES)
def test_bad_backward_input_raises_the_same_message(backend, case):
    (form, x, params, n_heads, d_out, mask), error, message = BAD_CASES[case]
    x_in = backend.from_numpy(x)
    w = [backend.from_numpy(params[k]) for k in PARAM_NAMES]
    d_out_in = d_out if isinstance(d_out, list) else backend.from_numpy(d_out)
    mask_in = None if mask is None else backend.from_numpy(mask)
    with pytest.raises(error) as caught:
        if form == "single":
            backend.single_head_attention_backward(x_in, *w[:3], d_out_in, mask_in)
        else:
            backend.multi_head_attention_backward(x_in, *w, n_heads, d_out_in, mask_in)
    assert str(caught.value) == message


def test_a_bad_d_out_is_caught_before_any_compute(backend):
    x, w = ShapeOnly((2, 5, 8)), ShapeOnly((8, 8))
    with pytest.raises(ValueError, match=r"^d_out must have the shape of out"):
        backend.multi_head_attention_backward(x, w, w, w, w, 2, ShapeOnly((2, 5, 4)))
    with pytest.raises(ValueError, match=r"^x has dtype float64 but d_out has"):
        backend.single_head_attention_backward(
            x, w, w, w, ShapeOnly((2, 5, 8), "float32")
        )


# Every option away from its default (tests/test_options.py registers them):
# mask, scale=False and every bias at once, float64: each backend's gradients
# equal NumPy's hand-written ones (the twin) and the oracle's own derivatives
# along random directions (tests/helpers.py, directional_derivatives).


def _options_gradients(backend, form):
    """(the backend's gradients, NumPy's, the oracle's directional derivatives)
    of L = sum(out * d_out) on options_problem, every option given."""
    from helpers import BIAS_NAMES, directional_derivatives, options_problem

    from shared.reference import reference_multi_head, reference_single_head

    case = options_problem()
    names = PARAM_NAMES if form == "multi" else PARAM_NAMES[:3]
    D = 8 if form == "multi" else 4  # single head: the first 4 columns
    arrays = {"x": case.x} | {n: case.params[n][:, :D] for n in names}
    arrays |= {n: case.biases[n][:D] for n in BIAS_NAMES[: len(names)]}
    mask = case.mask if form == "multi" else case.mask[:, 0]
    d_out = case.d_out[..., :D]

    def call(module, a):
        weights = [a[n] for n in names]
        biases = {n: a[n] for n in BIAS_NAMES[: len(names)]}
        cast = [module.from_numpy(w) for w in (a["x"], *weights)]
        b = {n: module.from_numpy(v) for n, v in biases.items()}
        given = (module.from_numpy(d_out), module.from_numpy(mask))
        if form == "single":
            grads = module.single_head_attention_backward(
                *cast,
                *given,
                scale=False,
                biases=dict(b_q=b["b_q"], b_k=b["b_k"], b_v=b["b_v"]),
            )
        else:
            grads = module.multi_head_attention_backward(
                *cast, case.H, *given, scale=False, biases=b
            )  # fmt: skip
        return {name: module.to_numpy(g) for name, g in grads.items()}

    def loss(a):
        weights = [a[n] for n in names]
        biases = {n: a[n] for n in BIAS_NAMES[: len(names)]}
        if form == "single":
            out, _ = reference_single_head(
                a["x"], *weights, mask, scale=False, biases=biases
            )
        else:
            out, _ = reference_multi_head(
                a["x"], *weights, case.H, mask, scale=False, biases=biases
            )
        return float(np.sum(out * d_out))

    found = directional_derivatives(loss, arrays)
    return call(backend, arrays), call(impl_numpy, arrays), found


@pytest.mark.parametrize("form", FORMS)
def test_backward_takes_every_option_away_from_its_default(backend, form):
    """single_head_attention_backward and multi_head_attention_backward with
    mask, scale=False and b_q, b_k, b_v (and b_o) at once."""
    from helpers import assert_directional_derivatives

    grads, by_hand, found = _options_gradients(backend, form)
    assert list(grads) == list(by_hand)
    assert len(grads) == (9 if form == "multi" else 7)  # x, the weights, biases
    for name, g in grads.items():
        assert_close(g, by_hand[name], "float64", f"{form} d_{name}")
    assert_directional_derivatives(grads, found, f"{form}, every option")


@pytest.mark.parametrize("form", ["single", "multi"])
def test_a_bad_mask_is_reported_before_a_bad_d_out(backend, form):
    """The forward's checks come first, the mask's among them: with a mask and a
    d_out both wrong, the mask is named, in every backend. (torch and JAX run
    their forward, which checks the mask again, only after d_out's check: tox
    -e mutate-torch's mutants that leave the mask out of the first check.)"""
    x, params = np.ones((2, 5, 8)), {n: np.ones((8, 8)) for n in PARAM_NAMES}
    x_in = backend.from_numpy(x)
    w = [backend.from_numpy(params[n]) for n in PARAM_NAMES]
    d_out = backend.from_numpy(np.zeros((2, 5, 3)))  # no form's out is (2, 5, 3)
    mask = backend.from_numpy(np.ones((4, 4), dtype=bool))
    with pytest.raises(ValueError) as raised:
        if form == "single":
            backend.single_head_attention_backward(x_in, *w[:3], d_out, mask)
        else:
            backend.multi_head_attention_backward(x_in, *w, 2, d_out, mask)
    assert str(raised.value).startswith("mask of shape (4, 4) does not broadcast")
