"""Input validation shared by all three backends.

Every backend calls these before any compute, so a bad input raises the same
error with the same message in NumPy, PyTorch and JAX. They read only `.shape`
and `.dtype`, never values, so they also run on JAX tracers under `jax.jit`
and on torch tensors under `torch.compile`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from shared.dtypes import FLOAT_DTYPES, dtype_name, np_dtype
from shared.variants import ROTARY_STYLES, Rotary, alibi_slopes, rotary_width

INTEGER_DTYPES = tuple(
    f"{sign}int{bits}" for sign in ("", "u") for bits in (8, 16, 32, 64)
)


class Dims(NamedTuple):
    """The sizes of one attention call: batch axes, T, C, H, D."""

    batch: tuple[int, ...]
    T: int
    C: int
    H: int
    D: int


def check_single_head(x, w_q, w_k, w_v, mask=None, *, framework=None, **biases) -> Dims:
    """Validate the arguments of `single_head_attention`; return their sizes.

    Args:
        framework: the caller's ("numpy", "torch" or "jax"): an array of
            another framework is a TypeError (None: any array).
        biases: b_q, b_k, b_v, each None or (D,).

    Raises:
        TypeError: x is not an array or not floating point, or an array of
            another framework.
        ValueError: anything else that does not fit, with what was expected and
            what was given.
    """
    _check_frameworks(framework, x=x, w_q=w_q, w_k=w_k, w_v=w_v, mask=mask, **biases)
    batch, T, C = _check_x(x)
    D = _check_projections(x, C, w_q=w_q, w_k=w_k, w_v=w_v)
    _check_biases(x, D, "(D,)", **biases)
    _check_mask(mask, (*batch, T, T), "(..., T, T)")
    return Dims(batch, T, C, 1, D)


def check_multi_head(
    x,
    w_q,
    w_k,
    w_v,
    w_o,
    n_heads,
    mask=None,
    *,
    framework=None,
    n_kv_heads=None,
    head_dim=None,
    **biases,
) -> Dims:
    """Validate the arguments of `multi_head_attention`; return their sizes.

    Args:
        framework: as for `check_single_head`.
        n_kv_heads, head_dim: None, or as `check_head_shapes` takes them.
        biases: b_q, b_k, b_v, b_o, each None or (C,).

    Raises:
        TypeError: x is not an array or not floating point, or an array of
            another framework.
        ValueError: anything else that does not fit.
    """
    arrays = dict(x=x, w_q=w_q, w_k=w_k, w_v=w_v, w_o=w_o, mask=mask, **biases)
    _check_frameworks(framework, **arrays)
    batch, T, C = _check_x(x)
    if n_kv_heads is not None or head_dim is not None:
        H, D = check_head_shapes(
            x, C, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, head_dim, **biases
        )
        _check_mask(mask, (*batch, H, T, T), "(..., H, T, T)")
        return Dims(batch, T, C, H, D)
    _check_projections(x, C, "(C, C)", w_q=w_q, w_k=w_k, w_v=w_v)
    _check_projections(x, C, "(C, C)", w_o=w_o)
    _check_square(C, w_q=w_q, w_o=w_o)
    _check_biases(x, C, "(C,)", **biases)
    H = check_heads(C, n_heads)
    _check_mask(mask, (*batch, H, T, T), "(..., H, T, T)")
    return Dims(batch, T, C, H, C // H)


# One framework per call: each backend computes on its own arrays (JAX on NumPy
# arrays too, as jax.numpy does), and names the converter for any other.
FRAMEWORKS = {
    "numpy": ("numpy",),
    "torch": ("torch",),
    "jax": ("jax", "numpy"),
}
_KINDS = {"numpy": "a NumPy array", "torch": "a torch tensor", "jax": "a JAX array"}
_CONVERT = {
    ("numpy", "torch"): "impl_torch.to_numpy({name})",
    ("numpy", "jax"): "impl_jax.to_numpy({name})",
    ("torch", "numpy"): "impl_torch.from_numpy({name})",
    ("torch", "jax"): "impl_torch.from_numpy(impl_jax.to_numpy({name}))",
    ("jax", "torch"): "impl_jax.from_numpy(impl_torch.to_numpy({name}))",
}


def framework_of(array) -> str | None:
    """'numpy', 'torch' or 'jax' for an array of one of them (a JAX tracer and
    a torch fake tensor included), else None. Reads only the array's type."""
    root = type(array).__module__.partition(".")[0]
    return {"numpy": "numpy", "torch": "torch", "jax": "jax", "jaxlib": "jax"}.get(root)


def _check_frameworks(framework: str | None, **arrays) -> None:
    """Raise TypeError for an array that `framework` does not compute on."""
    if framework is None:
        return
    for name, array in arrays.items():
        kind = framework_of(array)
        if kind is not None and kind not in FRAMEWORKS[framework]:
            convert = _CONVERT[(framework, kind)].format(name=name)
            raise TypeError(
                f"{name} is {_KINDS[kind]}, but impl_{framework} computes on "
                f"{_KINDS[framework].removeprefix('a ')}s: convert it with {convert}"
            )


def _check_biases(x, size: int, legend: str, **biases) -> None:
    """Each bias None, or a vector of `size` in x's dtype."""
    together = "x, the weights and the biases"
    _check_vectors(x, size, legend, _one_dtype=together, **biases)


def check_heads(d_model: int, n_heads) -> int:
    """n_heads must be a positive int that divides d_model; return it."""
    if isinstance(n_heads, np.integer):
        n_heads = int(n_heads)  # named by its value: "got 0", not "np.int64(0)"
    n_heads = _check_positive_int("n_heads", n_heads)
    if d_model % n_heads:
        raise ValueError(f"n_heads={n_heads} does not divide d_model={d_model}")
    return n_heads


def check_weights(weights, *, framework=None) -> None:
    """Validate the argument of `attention_entropy`: a float array of rank >= 1."""
    _check_frameworks(framework, weights=weights)
    _check_float(weights, "weights")
    if len(weights.shape) < 1:
        raise ValueError("weights must have rank >= 1 (..., T), got a scalar")


def check_key_padding(lengths_or_keep, T, *, framework=None) -> str:
    """Validate the arguments of `key_padding_mask`; return "lengths" or "keep".

    Shapes and dtypes only (values are never read, so it runs under `jax.jit`):
    integer lengths of any shape (...,), or a boolean keep array (..., T).

    Raises:
        TypeError: lengths_or_keep is not an array, or neither integer nor bool.
        ValueError: T is not a positive integer, or a keep array's last axis
            is not T.
    """
    _check_frameworks(framework, lengths_or_keep=lengths_or_keep)
    _check_positive_int("T", T)
    if not (hasattr(lengths_or_keep, "shape") and hasattr(lengths_or_keep, "dtype")):
        raise TypeError(
            "lengths_or_keep must be an array of integer lengths (...,) or a "
            f"boolean keep array (..., T), got {type(lengths_or_keep).__name__}"
        )
    dtype = dtype_name(lengths_or_keep)
    shape = tuple(int(n) for n in lengths_or_keep.shape)
    if dtype == "bool":
        if not shape or shape[-1] != T:
            raise ValueError(
                f"a boolean keep array must have shape (..., T) with T = {T}, "
                f"got {shape}"
            )
        return "keep"
    if dtype in INTEGER_DTYPES:
        return "lengths"
    raise TypeError(
        "lengths_or_keep must be an array of integer lengths (...,) or a boolean "
        f"keep array (..., T), got dtype {dtype}"
    )


def _check_positive_int(name: str, value) -> int:
    """Raise ValueError unless `value` is a positive int (not a bool); return it."""
    if not isinstance(value, (int, np.integer)) and hasattr(value, "shape"):
        # a JAX array here is most often a traced argument of jax.jit
        how = (
            f'under jax.jit, mark it static: jax.jit(f, static_argnames=("{name}",)), '
            "or call the _jit twin of the function (e.g. multi_head_attention_jit)"
            if framework_of(value) == "jax"
            else f"pass int({name})"
        )
        raise ValueError(
            f"{name} must be a Python int, known before any compute, got an array "
            f"{value!r}; {how}"
        )
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _check_array(array, name: str) -> None:
    """Raise TypeError unless `array` has a .shape and a .dtype."""
    if not (hasattr(array, "shape") and hasattr(array, "dtype")):
        raise TypeError(
            f"{name} must be an array with .shape and .dtype, "
            f"got {type(array).__name__}"
        )


def _check_float(array, name: str) -> str:
    """Raise TypeError unless `array` is a floating-point array; return its dtype."""
    _check_array(array, name)
    dtype = dtype_name(array)
    if dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{name} must be a floating-point array ({', '.join(FLOAT_DTYPES)}), "
            f"got dtype {dtype}"
        )
    return dtype


def _check_x(x) -> tuple[tuple[int, ...], int, int]:
    _check_float(x, "x")
    shape = tuple(int(n) for n in x.shape)
    if len(shape) < 2:
        raise ValueError(f"x must have shape (..., T, C) with rank >= 2, got {shape}")
    *batch, T, C = shape
    if T < 1:
        raise ValueError(f"x has T = 0 positions; attention needs T >= 1, got {shape}")
    if C < 1:
        raise ValueError(f"x has C = 0 features; attention needs C >= 1, got {shape}")
    return tuple(batch), T, C


def _check_projections(x, C: int, legend: str = "(C, D)", **weights) -> int:
    """Each weight `legend`, (C, D) with one D, in x's dtype; return D.
    Multi-head attention's legend is (C, C)."""
    first_name, first = next(iter(weights.items()))
    for name, w in weights.items():
        _check_array(w, name)
        shape = tuple(int(n) for n in w.shape)
        if len(shape) != 2:
            raise ValueError(f"{name} must have rank 2, shape {legend}, got {shape}")
        if shape[0] != C:
            raise ValueError(
                f"{name} must have shape {legend} with C = {C} (the last axis of x), "
                f"got {shape}"
            )
        if shape != tuple(first.shape):
            raise ValueError(
                f"{name} has shape {shape} but {first_name} has {tuple(first.shape)}; "
                f"w_q, w_k and w_v must share one shape {legend}"
            )
        if dtype_name(w) != dtype_name(x):
            raise ValueError(
                f"x has dtype {dtype_name(x)} but {name} has dtype {dtype_name(w)}; "
                "give x and the weights one dtype"
            )
        if shape[1] < 1:
            raise ValueError(f"{name} must have D >= 1 columns, got {shape}")
    return int(first.shape[1])


def _check_square(C: int, **weights) -> None:
    """Each weight (C, C), as multi-head attention needs."""
    for name, w in weights.items():
        if tuple(w.shape) != (C, C):
            raise ValueError(
                f"{name} must have shape (C, C) = {(C, C)} for multi-head attention, "
                f"got {tuple(w.shape)}"
            )


def _check_mask(mask, target: tuple[int, ...], legend: str) -> None:
    if mask is None:
        return
    if not (hasattr(mask, "shape") and hasattr(mask, "dtype")):
        raise TypeError(
            f"mask must be a boolean array (True = may attend), "
            f"got {type(mask).__name__}"
        )
    if dtype_name(mask) != "bool":
        raise ValueError(
            f"mask must be a boolean array (True = may attend), "
            f"got dtype {dtype_name(mask)}"
        )
    shape = tuple(int(n) for n in mask.shape)
    try:
        fits = np.broadcast_shapes(shape, target) == target
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(
            f"mask of shape {shape} does not broadcast to {legend} = {target}"
        )


def check_d_out(
    d_out, x, out_shape: tuple[int, ...], legend: str, *, framework=None
) -> None:
    """Validate the upstream gradient of a backward function: an array with
    out's shape (`out_shape`, written `legend`, e.g. "(..., T, D)") and x's dtype.

    Called after the forward's own check, which gives `out_shape`.

    Raises:
        TypeError: d_out is not an array.
        ValueError: d_out's shape is not out's, or its dtype is not x's.
    """
    _check_frameworks(framework, d_out=d_out)
    _check_array(d_out, "d_out")
    shape = tuple(int(n) for n in d_out.shape)
    if shape != tuple(out_shape):
        raise ValueError(
            f"d_out must have the shape of out, {legend} = {tuple(out_shape)}, "
            f"got {shape}"
        )
    if dtype_name(d_out) != dtype_name(x):
        raise ValueError(
            f"x has dtype {dtype_name(x)} but d_out has dtype {dtype_name(d_out)}; "
            "give x and d_out one dtype"
        )


# The variants of modern attention (impl_*/variants.py, docs/variants.md).


class Variant(NamedTuple):
    """The checked options of a call with any variant: what the backends read.

    Attributes:
        H_kv: key/value heads; query head h reads KV head h // groups.
        groups: G = H / H_kv, the query heads of one KV head.
        rotary: a Rotary, or None. positions: None (0, 1, ...) or an integer
            array, the rotary positions of x's rows.
        window: W or None: key j reaches query i iff i - W < j <= i.
        slopes: ALiBi's slope per head (a tuple of H floats), or None.
        softcap: c or None: scores -> c * tanh(scores / c).
        sinks: None or (H,), each head's logit in the softmax's denominator.
        q_norm, k_norm: None or (D,), RMSNorm's weights on q and k.
        qk_norm_eps: RMSNorm's eps.
    """

    H_kv: int
    groups: int
    rotary: Rotary | None
    positions: object
    window: int | None
    slopes: tuple[float, ...] | None
    softcap: float | None
    sinks: object
    q_norm: object
    k_norm: object
    qk_norm_eps: float


QK_NORM_EPS = 1e-6
"""RMSNorm's eps on q and k by default (Qwen 3's `rms_norm_eps`)."""


def check_kv_heads(n_heads: int, n_kv_heads) -> int:
    """n_kv_heads a positive int that divides n_heads (None: n_heads); return it."""
    if n_kv_heads is None:
        return n_heads
    if isinstance(n_kv_heads, np.integer):
        n_kv_heads = int(n_kv_heads)
    n_kv_heads = _check_positive_int("n_kv_heads", n_kv_heads)
    if n_heads % n_kv_heads:
        raise ValueError(
            f"n_heads={n_heads} is not a multiple of n_kv_heads={n_kv_heads}: "
            "each key/value head serves n_heads / n_kv_heads query heads"
        )
    return n_kv_heads


def check_head_shapes(
    x, C: int, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, head_dim, **biases
) -> tuple[int, int]:
    """The projections' shapes with n_kv_heads (GQA) or head_dim given: w_q
    (C, H * D), w_k and w_v (C, H_kv * D), w_o (H * D, C), and the biases to
    match; D = head_dim, or C // H. Return (H, D)."""
    if head_dim is None:
        H = check_heads(C, n_heads)
        D = C // H
    else:
        H = _check_positive_int("n_heads", _as_int(n_heads))
        D = _check_positive_int("head_dim", _as_int(head_dim))
    H_kv = check_kv_heads(H, n_kv_heads)
    expected = {
        "w_q": ((C, H * D), "(C, H * D)"),
        "w_k": ((C, H_kv * D), "(C, n_kv_heads * D)"),
        "w_v": ((C, H_kv * D), "(C, n_kv_heads * D)"),
        "w_o": ((H * D, C), "(H * D, C)"),
    }
    for name, w in (("w_q", w_q), ("w_k", w_k), ("w_v", w_v), ("w_o", w_o)):
        _check_array(w, name)
        shape, legend = expected[name]
        if tuple(int(n) for n in w.shape) != shape:
            raise ValueError(
                f"{name} must have shape {legend} = {shape} for n_heads={H}, "
                f"n_kv_heads={H_kv}, head width D = {D}, got {tuple(w.shape)}"
            )
        if dtype_name(w) != dtype_name(x):
            raise ValueError(
                f"x has dtype {dtype_name(x)} but {name} has dtype {dtype_name(w)}; "
                "give x and the weights one dtype"
            )
    sizes = {"b_q": (H * D, "(H * D,)"), "b_o": (C, "(C,)")}
    for name, b in biases.items():
        size, legend = sizes.get(name, (H_kv * D, "(n_kv_heads * D,)"))
        _check_biases(x, size, legend, **{name: b})
    return H, D


def _as_int(value):
    """A NumPy integer as a Python int (named by its value in a message)."""
    return int(value) if isinstance(value, np.integer) else value


def check_variant(
    x,
    dims: Dims,
    rows: tuple[int, ...],
    *,
    framework=None,
    n_kv_heads=None,
    rotary=None,
    positions=None,
    window=None,
    alibi=False,
    softcap=None,
    sinks=None,
    q_norm=None,
    k_norm=None,
    qk_norm_eps=QK_NORM_EPS,
) -> Variant | None:
    """Validate the variant options of a multi-head call (after its
    `check_multi_head`, whose sizes are `dims`); return them checked, or None
    when every one is at its default (the call is plain attention).

    Args:
        rows: the shape of x without its last axis, (..., T) (for decoding,
            x_t's (...,)): what `positions` must broadcast to.

    Raises:
        TypeError: rotary not a Rotary; an array that is not one, or of
            another framework.
        ValueError: anything else that does not fit, before any compute.
    """
    arrays = dict(positions=positions, sinks=sinks, q_norm=q_norm, k_norm=k_norm)
    _check_frameworks(framework, **arrays)
    H, D = dims.H, dims.D
    H_kv = check_kv_heads(H, n_kv_heads)
    if rotary is not None:
        check_rotary(rotary, D)
    if positions is not None:
        _check_positions(positions, rotary, rows)
    if window is not None:
        _check_positive_int("window", _as_int(window))
    if not isinstance(alibi, bool):
        raise ValueError(f"alibi must be True or False, got {alibi!r}")
    if softcap is not None:
        _check_positive_number(
            "softcap", softcap, "scores are capped to (-softcap, softcap)"
        )
    _check_vectors(x, H, "(H,)", sinks=sinks)
    _check_vectors(x, D, "(D,)", q_norm=q_norm, k_norm=k_norm)
    _check_positive_number("qk_norm_eps", qk_norm_eps, "RMSNorm's eps")
    if qk_norm_eps != QK_NORM_EPS and q_norm is None and k_norm is None:
        raise ValueError(
            "qk_norm_eps is the eps of q_norm and k_norm, and neither is given"
        )
    given = (n_kv_heads, rotary, window, softcap, sinks, q_norm, k_norm)
    if all(option is None for option in given) and not alibi:
        return None
    return Variant(
        H_kv=H_kv,
        groups=H // H_kv,
        rotary=rotary,
        positions=positions,
        window=None if window is None else int(window),
        slopes=alibi_slopes(H) if alibi else None,
        softcap=None if softcap is None else float(softcap),
        sinks=sinks,
        q_norm=q_norm,
        k_norm=k_norm,
        qk_norm_eps=float(qk_norm_eps),
    )


def check_rotary(rotary, D: int) -> int:
    """rotary a Rotary that fits a head of width D; return R, the width it turns."""
    if not isinstance(rotary, Rotary):
        raise TypeError(
            "rotary must be None or a Rotary(base, style, fraction) (from shared "
            f"import Rotary), got {type(rotary).__name__}"
        )
    if rotary.style not in ROTARY_STYLES:
        raise ValueError(
            "rotary style must be 'neox' (rotate halves) or 'gptj' (interleaved "
            f"pairs), got {rotary.style!r}"
        )
    _check_positive_number("rotary base", rotary.base, "theta")
    fraction = rotary.fraction
    if (
        isinstance(fraction, bool)
        or not isinstance(fraction, (int, float))
        or not (0 < fraction <= 1)
    ):
        raise ValueError(
            f"rotary fraction must be a number in (0, 1], the part of the head "
            f"width turned, got {fraction!r}"
        )
    R = rotary_width(D, fraction)
    if R < 2 or R % 2:
        raise ValueError(
            f"rotary positions turn pairs of features: fraction {fraction} of the "
            f"head width D = {D} gives R = {R}, which must be even and at least 2"
        )
    return R


def _check_positions(positions, rotary, rows: tuple[int, ...]) -> None:
    if rotary is None:
        raise ValueError(
            "positions are the rotary positions of x's rows: give rotary=Rotary(...) "
            "with them"
        )
    if not (hasattr(positions, "shape") and hasattr(positions, "dtype")):
        raise TypeError(
            f"positions must be an integer array, got {type(positions).__name__}"
        )
    if dtype_name(positions) not in INTEGER_DTYPES:
        raise ValueError(
            f"positions must be an integer array, got dtype {dtype_name(positions)}"
        )
    shape = tuple(int(n) for n in positions.shape)
    try:
        fits = np.broadcast_shapes(shape, rows) == rows
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(
            f"positions of shape {shape} does not broadcast to x's shape without "
            f"its last axis, {rows}"
        )


def _check_positive_number(name: str, value, what: str) -> None:
    number = isinstance(value, (int, float, np.integer, np.floating))
    if isinstance(value, bool) or not number or not 0 < value < float("inf"):
        raise ValueError(f"{name} must be a positive number ({what}), got {value!r}")


def _check_vectors(x, size: int, legend: str, _one_dtype=None, **vectors) -> None:
    """Each vector None, or of shape (size,) in x's dtype; `_one_dtype` names
    what must share it in the message (default: x and the vector)."""
    for name, a in vectors.items():
        if a is None:
            continue
        _check_array(a, name)
        shape = tuple(int(n) for n in a.shape)
        if shape != (size,):
            raise ValueError(
                f"{name} must have shape {legend} = ({size},), got {shape}"
            )
        if dtype_name(a) != dtype_name(x):
            raise ValueError(
                f"x has dtype {dtype_name(x)} but {name} has dtype {dtype_name(a)}; "
                f"give {_one_dtype or f'x and {name}'} one dtype"
            )


# Blockwise attention and the KV cache (impl_*/blockwise.py, impl_*/kv_cache.py).


def check_block_size(block_size) -> int:
    """block_size must be a positive int; return it."""
    return _check_positive_int("block_size", block_size)


def check_workers(workers) -> int:
    """workers (the threads of impl_numpy/tuned.py) must be a positive int."""
    return _check_positive_int("workers", workers)


def check_blockwise(q, k, v, block_size, *, framework=None) -> Dims:
    """Validate the arguments of `blockwise_attention`; return their sizes (H = 1).

    Raises:
        TypeError: q, k or v is not a floating-point array.
        ValueError: q, k and v do not share one shape (..., T, D) and one dtype,
            T or D is 0, or block_size is not a positive integer.
    """
    _check_frameworks(framework, q=q, k=k, v=v)
    for name, array in (("q", q), ("k", k), ("v", v)):
        _check_float(array, name)
    shape = tuple(int(n) for n in q.shape)
    if len(shape) < 2:
        raise ValueError(f"q must have shape (..., T, D) with rank >= 2, got {shape}")
    for name, array in (("k", k), ("v", v)):
        if tuple(int(n) for n in array.shape) != shape:
            raise ValueError(
                f"{name} has shape {tuple(array.shape)} but q has {shape}; "
                "q, k and v must share one shape (..., T, D)"
            )
        if dtype_name(array) != dtype_name(q):
            raise ValueError(
                f"q has dtype {dtype_name(q)} but {name} has dtype "
                f"{dtype_name(array)}; give q, k and v one dtype"
            )
    *batch, T, D = shape
    if T < 1:
        raise ValueError(f"q has T = 0 positions; attention needs T >= 1, got {shape}")
    if D < 1:
        raise ValueError(f"q has D = 0 features; attention needs D >= 1, got {shape}")
    check_block_size(block_size)
    return Dims(tuple(batch), T, D, 1, D)


def check_blockwise_variant(
    q,
    causal,
    *,
    window=None,
    softcap=None,
    alibi_slopes=None,
    sinks=None,
    framework=None,
) -> bool:
    """Validate the variant options of `blockwise_attention` (after its
    `check_blockwise`); return whether any is given.

    Raises:
        TypeError, ValueError: as `check_variant`; a window without causal;
            slopes or sinks that do not broadcast to q's batch axes (...,).
    """
    _check_frameworks(framework, alibi_slopes=alibi_slopes, sinks=sinks)
    check_window(window, causal)
    if softcap is not None:
        _check_positive_number(
            "softcap", softcap, "scores are capped to (-softcap, softcap)"
        )
    batch = tuple(int(n) for n in q.shape[:-2])
    for name, a in (("alibi_slopes", alibi_slopes), ("sinks", sinks)):
        if a is None:
            continue
        _check_float(a, name)
        shape = tuple(int(n) for n in a.shape)
        try:
            fits = np.broadcast_shapes(shape, batch) == batch
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(
                f"{name} of shape {shape} does not broadcast to q's batch axes "
                f"(...,) = {batch}, one per head"
            )
        if dtype_name(a) != dtype_name(q):
            raise ValueError(
                f"q has dtype {dtype_name(q)} but {name} has dtype {dtype_name(a)}; "
                f"give q and {name} one dtype"
            )
    given = (window, softcap, alibi_slopes, sinks)
    return any(option is not None for option in given)


def check_window(window, causal=True) -> None:
    """window None, or a positive int with causal attention."""
    if window is None:
        return
    _check_positive_int("window", _as_int(window))
    if not causal:
        raise ValueError(
            "window needs causal=True: a sliding window is the W keys up to each query"
        )


def check_kv_cache_sizes(
    batch, max_len, d_model, n_heads, *, n_kv_heads=None, head_dim=None, window=None
) -> Dims:
    """Validate the arguments of `init_kv_cache`; return the cache's sizes:
    T = its slots (max_len, or min(max_len, window) with a window), H = the
    heads it holds (n_kv_heads if given), D = head_dim if given.

    Raises:
        ValueError: batch is not a tuple of non-negative ints, max_len or d_model
            is not a positive int, n_heads does not divide d_model (without
            head_dim), or n_kv_heads, head_dim or window does not fit.
    """
    if not isinstance(batch, tuple) or not all(
        isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 0
        for n in batch
    ):
        raise ValueError(
            f"batch must be a tuple of non-negative ints (the leading axes of x), "
            f"got {batch!r}"
        )
    _check_positive_int("max_len", max_len)
    _check_positive_int("d_model", d_model)
    if n_kv_heads is None and head_dim is None and window is None:
        H = check_heads(int(d_model), n_heads)
        return Dims(
            tuple(int(n) for n in batch), int(max_len), int(d_model), H, d_model // H
        )
    if head_dim is None:
        H = check_heads(int(d_model), n_heads)
        D = d_model // H
    else:
        H = _check_positive_int("n_heads", _as_int(n_heads))
        D = _check_positive_int("head_dim", _as_int(head_dim))
    H_kv = check_kv_heads(H, n_kv_heads)
    slots = int(max_len)
    if window is not None:
        slots = min(slots, _check_positive_int("window", _as_int(window)))
    return Dims(tuple(int(n) for n in batch), slots, int(d_model), H_kv, D)


def check_decode_step(
    x_t,
    cache,
    w_q,
    w_k,
    w_v,
    w_o,
    n_heads,
    *,
    framework=None,
    n_kv_heads=None,
    head_dim=None,
    **biases,
) -> Dims:
    """Validate the arguments of `decode_step`; return the sizes (T = max_len).

    Raises:
        TypeError: x_t is not a floating-point array, or the cache is not a
            (k, v, length) triple of arrays.
        ValueError: anything else that does not fit: the weights, n_heads, the
            cache's shape (..., H, max_len, D) or dtype, or its length not a
            0-d integer array.
    """
    cached = {f"cache.{n}": getattr(cache, n, None) for n in ("k", "v", "length")}
    arrays = dict(x_t=x_t, w_q=w_q, w_k=w_k, w_v=w_v, w_o=w_o, **cached, **biases)
    _check_frameworks(framework, **arrays)
    _check_float(x_t, "x_t")
    shape = tuple(int(n) for n in x_t.shape)
    if len(shape) < 1:
        raise ValueError(f"x_t must have shape (..., C) with rank >= 1, got {shape}")
    *batch, C = shape
    if n_kv_heads is None and head_dim is None:
        _check_projections(x_t, C, "(C, C)", w_q=w_q, w_k=w_k, w_v=w_v)
        _check_projections(x_t, C, "(C, C)", w_o=w_o)
        _check_square(C, w_q=w_q, w_o=w_o)
        _check_biases(x_t, C, "(C,)", **biases)
        H = check_heads(C, n_heads)
        H_kv, D, heads = H, C // H, "H"
    else:
        H, D = check_head_shapes(
            x_t, C, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, head_dim, **biases
        )
        H_kv, heads = check_kv_heads(H, n_kv_heads), "n_kv_heads"
    parts = tuple(getattr(cache, name, None) for name in ("k", "v", "length"))
    if not all(hasattr(a, "shape") and hasattr(a, "dtype") for a in parts):
        raise TypeError(
            "cache must be a KVCache(k, v, length) of arrays, as init_kv_cache "
            f"makes, got {type(cache).__name__}"
        )
    k, v, length = parts
    k_shape = tuple(int(n) for n in k.shape)
    expected = "(" + ", ".join(str(n) for n in (*batch, H_kv)) + f", max_len, {D})"
    if (
        len(k_shape) != len(batch) + 3
        or k_shape[:-2] != (*batch, H_kv)
        or k_shape[-1] != D
    ):
        raise ValueError(
            f"cache.k must have shape (..., {heads}, max_len, D) = {expected} for "
            f"x_t of shape {shape} and {'n_heads' if heads == 'H' else heads}="
            f"{H_kv}, got {k_shape}"
        )
    if tuple(int(n) for n in v.shape) != k_shape:
        raise ValueError(
            f"cache.v has shape {tuple(v.shape)} but cache.k has {k_shape}; "
            "they must share one shape (..., H, max_len, D)"
        )
    for name, array in (("cache.k", k), ("cache.v", v)):
        if dtype_name(array) != dtype_name(x_t):
            raise ValueError(
                f"x_t has dtype {dtype_name(x_t)} but {name} has dtype "
                f"{dtype_name(array)}; make the cache in x_t's dtype"
            )
    if len(length.shape) != 0 or dtype_name(length) not in INTEGER_DTYPES:
        raise ValueError(
            "cache.length must be a 0-d integer array (positions filled), "
            f"got shape {tuple(length.shape)} dtype {dtype_name(length)}"
        )
    return Dims(tuple(batch), k_shape[-2], C, H, D)


def check_numpy_weights(**arrays) -> dict:
    """The arguments of a module's `from_weights`: NumPy arrays, or None for a
    bias not given; return the arrays given, by name.

    Raises:
        TypeError: an argument that is not a NumPy array; a layer or module
            given instead is told to use `from_layer`.
    """
    given = {name: a for name, a in arrays.items() if a is not None}
    for name, array in given.items():
        if not isinstance(array, np.ndarray):
            layer = callable(array) and not hasattr(array, "shape")
            hint = (
                ": to load another library's layer, use "
                "CausalSelfAttention.from_layer(layer)"
                if layer
                else " in the (in, out) layout (to_numpy converts a framework's array)"
            )
            raise TypeError(
                f"from_weights takes NumPy arrays; {name} is "
                f"{type(array).__name__}{hint}"
            )
    return given


def check_module_sizes(d_model: int, n_heads, n_kv_heads, head_dim) -> tuple:
    """A module's sizes: (H, H_kv, D), D = head_dim or d_model // H."""
    if head_dim is None:
        H = check_heads(d_model, n_heads)
        D = d_model // H
    else:
        H = _check_positive_int("n_heads", _as_int(n_heads))
        D = _check_positive_int("head_dim", _as_int(head_dim))
    return H, check_kv_heads(H, n_kv_heads), D


def module_sizes_of(n_heads, w_q, w_k, w_v, w_o, **biases) -> dict:
    """n_kv_heads and head_dim read from a module's weights (`from_weights`),
    for those away from plain attention's: {} for (C, C) projections. The
    shapes are then held to them (`check_head_shapes`, its messages)."""
    C = w_q.shape[0]
    square = all(getattr(w, "shape", None) == (C, C) for w in (w_q, w_k, w_v, w_o))
    if square:  # plain attention's projections: its own checks follow
        return {}
    H = _check_positive_int("n_heads", _as_int(n_heads))
    D = w_o.shape[0] // H if w_o.ndim == 2 and w_o.shape[0] >= H else C // H
    H_kv = w_k.shape[1] // D if w_k.ndim == 2 and D else H
    sizes = {}
    if H_kv != H:
        sizes["n_kv_heads"] = H_kv
    if H * D != C or C % H:
        sizes["head_dim"] = D
    check_head_shapes(
        w_q, C, w_q, w_k, w_v, w_o, H, sizes.get("n_kv_heads"),
        sizes.get("head_dim"), **{n: b for n, b in biases.items() if b is not None},
    )  # fmt: skip
    return sizes


# Sharded attention (impl_*/sharded.py, docs/sharding.md).


def check_n_devices(n_devices) -> int:
    """n_devices must be a positive int; return it."""
    return _check_positive_int("n_devices", n_devices)


def check_sequence_shards(T: int, n_devices) -> int:
    """The zigzag layout needs two chunks of at least one position per device:
    T >= 2N. Return N."""
    N = check_n_devices(n_devices)
    if T < 2 * N:
        raise ValueError(
            f"the zigzag layout cuts the sequence into 2 * n_devices = {2 * N} "
            f"chunks, two per device, so it needs T >= {2 * N}; got T = {T}"
        )
    return N


def check_head_shards(n_heads: int, n_devices) -> int:
    """The heads strategy gives each device H / N whole heads; return H / N."""
    N = check_n_devices(n_devices)
    if n_heads % N:
        raise ValueError(
            f"n_devices={N} does not divide n_heads={n_heads}; the heads "
            "strategy gives each device n_heads / n_devices whole heads"
        )
    return n_heads // N


def check_sharded(
    x, w_q, w_k, w_v, w_o, n_heads, keep, *, framework=None, **biases
) -> Dims:
    """Validate one device's arguments of `ring_attention` or
    `head_parallel_attention`: x (..., R, C), the rows of `shard_sequence`
    (R = 2c, two chunks), and keep (..., R) bool. Return the sizes, T = R.

    Raises:
        TypeError, ValueError: as `check_multi_head`, and for a keep that is
            not a bool array of x's shape without C, or an odd R.
    """
    dims = check_multi_head(
        x, w_q, w_k, w_v, w_o, n_heads, framework=framework, **biases
    )
    _check_frameworks(framework, keep=keep)
    _check_array(keep, "keep")
    shape = tuple(int(n) for n in keep.shape)
    if dtype_name(keep) != "bool" or shape != (*dims.batch, dims.T):
        raise ValueError(
            f"keep must be a boolean array (..., R) = {(*dims.batch, dims.T)} "
            f"(True = a real key), got {dtype_name(keep)} {shape}; take x and "
            "keep from shard_sequence"
        )
    if dims.T % 2:
        raise ValueError(
            f"x holds R = {dims.T} rows on this device, but the zigzag layout "
            "gives every device two chunks of equal length: take x from "
            "shard_sequence"
        )
    return dims


# The flash-attention kernels (impl_torch/kernel.py, impl_jax/kernel.py):
# docs/kernels.md says where each limit comes from.

MAX_HEAD_WIDTH = 256
"""The widest head the kernels take: one query block's accumulator is a
(block_size, D) tile kept on chip for the whole loop."""
MIN_COMPILED_BLOCK = 16
"""The smallest block a GPU's matrix units multiply (tl.dot needs 16 rows)."""
MAX_COMPILED_TILE_BYTES = 128 * 128 * 2
"""The largest (block_size, head tile) a compiled program keeps on chip, in
bytes: a (128, 128) tile of bfloat16 (Triton 3.9 for sm_90: 96.5 KiB of shared
memory, docs/kernels.md)."""


def tile_size(n: int) -> int:
    """n rounded up to a power of two, at least 16: how the kernels tile the
    head width D (and a sequence shorter than one block)."""
    return max(MIN_COMPILED_BLOCK, 1 << (int(n) - 1).bit_length())


def check_flash(
    q,
    k,
    v,
    mask,
    block_size,
    *,
    framework=None,
    n_kv_heads=None,
    causal=True,
    window=None,
    softcap=None,
) -> Dims:
    """Validate the arguments of `flash_attention`; return q's sizes (H = 1).

    Args:
        n_kv_heads: None (q, k and v of one shape), or H_kv: q (..., H, T, D),
            k and v (..., H_kv, T, D), H a multiple of H_kv (GQA).
        causal, window, softcap: as `check_blockwise_variant` takes them.

    Raises:
        TypeError: as `check_blockwise`, or a mask that is not an array.
        ValueError: as `check_blockwise` and `check_blockwise_variant`; a mask
            that is not a boolean key mask (..., 1, T); block_size not a power
            of two; D over MAX_HEAD_WIDTH; k and v without the n_kv_heads heads.
    """
    if n_kv_heads is None:
        dims = check_blockwise(q, k, v, block_size, framework=framework)
    else:
        dims = check_blockwise(q, q, q, block_size, framework=framework)
        _check_frameworks(framework, k=k, v=v)
        _check_kv_heads_of(q, k, v, n_kv_heads)
    _check_frameworks(framework, mask=mask)
    _check_key_mask(mask, (*dims.batch, 1, dims.T), "(..., 1, T)")
    check_kernel_sizes(block_size, dims.D)
    check_blockwise_variant(q, causal, window=window, softcap=softcap)
    return dims


def _check_kv_heads_of(q, k, v, n_kv_heads) -> None:
    """k and v (..., H_kv, T, D) in q's dtype for q (..., H, T, D), H_kv =
    n_kv_heads dividing H."""
    shape = tuple(int(n) for n in q.shape)
    if len(shape) < 3:
        raise ValueError(
            "with n_kv_heads, q must have shape (..., H, T, D) with rank >= 3, "
            f"got {shape}"
        )
    H_kv = check_kv_heads(shape[-3], _as_int(n_kv_heads))
    expected = (*shape[:-3], H_kv, *shape[-2:])
    for name, array in (("k", k), ("v", v)):
        _check_float(array, name)
        if tuple(int(n) for n in array.shape) != expected:
            raise ValueError(
                f"{name} has shape {tuple(array.shape)} but q has {shape}: with "
                f"n_kv_heads={H_kv}, k and v must have shape (..., n_kv_heads, T, "
                f"D) = {expected}"
            )
        if dtype_name(array) != dtype_name(q):
            raise ValueError(
                f"q has dtype {dtype_name(q)} but {name} has dtype "
                f"{dtype_name(array)}; give q, k and v one dtype"
            )


def check_multi_head_flash(
    x,
    w_q,
    w_k,
    w_v,
    w_o,
    n_heads,
    mask,
    block_size,
    *,
    framework=None,
    n_kv_heads=None,
    causal=True,
    window=None,
    softcap=None,
    **biases,
) -> Dims:
    """Validate the arguments of `multi_head_flash_attention`; return their sizes.

    Raises:
        TypeError, ValueError: as `check_multi_head` (with n_kv_heads), as
            `check_flash` for the mask (..., H, 1, T), block_size and the head
            width, and as `check_blockwise_variant` for window and softcap.
    """
    dims = check_multi_head(
        x, w_q, w_k, w_v, w_o, n_heads, framework=framework, n_kv_heads=n_kv_heads,
        **biases,
    )  # fmt: skip
    _check_frameworks(framework, mask=mask)
    _check_key_mask(mask, (*dims.batch, dims.H, 1, dims.T), "(..., H, 1, T)")
    check_kernel_sizes(block_size, dims.D)
    check_blockwise_variant(x, causal, window=window, softcap=softcap)
    return dims


def check_kernel_sizes(block_size, D: int) -> int:
    """block_size a power of two and D at most MAX_HEAD_WIDTH; return block_size."""
    block_size = check_block_size(block_size)
    if block_size & (block_size - 1):
        raise ValueError(
            "block_size must be a power of two (a kernel's tiles are), "
            f"got {block_size}"
        )
    if D > MAX_HEAD_WIDTH:
        raise ValueError(
            f"head width D = {D} is more than the flash kernels take (at most "
            f"{MAX_HEAD_WIDTH}): use more heads, or blockwise_attention"
        )
    return block_size


def check_interpret(interpret, *, on_gpu: bool, where: str, language: str) -> bool:
    """Whether to run the kernel in its interpreter: `interpret`, or for None,
    off a GPU only.

    Args:
        on_gpu: whether the arrays are on a GPU the compiled kernel runs on.
        where: where they are, for the message (e.g. "cpu").
        language: "Pallas" or "Triton", for the message.

    Raises:
        ValueError: interpret is not None, True or False, or False off a GPU.
    """
    if interpret is None:
        return not on_gpu
    if not isinstance(interpret, bool):
        raise ValueError(f"interpret must be None, True or False, got {interpret!r}")
    if not interpret and not on_gpu:
        raise ValueError(
            f"interpret=False compiles the {language} kernel for a GPU, but the "
            f"arrays are on {where}: pass interpret=True (or None) to run it in "
            "the interpreter, or put them on a GPU"
        )
    return interpret


def check_compiled_tile(block_size: int, D: int, dtype: str) -> None:
    """The tile limits of a compiled kernel: at least MIN_COMPILED_BLOCK rows,
    at most MAX_COMPILED_TILE_BYTES per (block_size, tile_size(D)) tile of
    `dtype` (a name, e.g. "bfloat16").

    Raises:
        ValueError: block_size too small, or too large for the head width.
    """
    if block_size < MIN_COMPILED_BLOCK:
        raise ValueError(
            f"block_size={block_size} is too small for the compiled kernel: a "
            f"GPU's matrix units multiply at least {MIN_COMPILED_BLOCK} rows; use "
            f"{MIN_COMPILED_BLOCK} or more (the interpreter takes any power of two)"
        )
    row_bytes = tile_size(D) * np_dtype(dtype).itemsize
    largest = max(MIN_COMPILED_BLOCK, MAX_COMPILED_TILE_BYTES // row_bytes)
    if block_size > largest:
        raise ValueError(
            f"block_size={block_size} with head width D = {D} makes a "
            f"({block_size}, {tile_size(D)}) tile of {dtype}, more than the compiled "
            f"kernel keeps on chip ({MAX_COMPILED_TILE_BYTES // 1024} KiB a tile): "
            f"use block_size={largest} or smaller"
        )


def _check_key_mask(mask, target: tuple[int, ...], legend: str) -> None:
    """None, or a boolean mask that broadcasts to `target`, one row of keys."""
    if mask is None:
        return
    T = target[-1]
    _check_mask(mask, (*target[:-2], T, T), legend.replace("1, T", "T, T"))
    shape = tuple(int(n) for n in mask.shape)
    if len(shape) >= 2 and shape[-2] != 1:
        raise ValueError(
            f"mask of shape {shape} is not a key mask: the flash kernels take "
            f"{legend} = {target}, one row of keys for every query (as "
            "key_padding_mask makes), never a (T, T) mask"
        )
