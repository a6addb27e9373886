"""shared/validation/ called directly with NumPy arrays, for the checks that no
call of the NumPy backend reaches: the flash kernels' (tile_size,
check_kernel_sizes, check_flash, check_multi_head_flash, check_interpret,
check_compiled_tile; tests/test_kernels.py reaches them through the kernels,
with --kernels only), one device's arguments of sharded attention
(check_sharded, check_sequence_shards, check_head_shards), and the framework
check of every argument of every check (tests/test_biases.py proves it
between two backends; here a stand-in for a torch tensor proves it with NumPy
alone). Each bad input
raises one error type with one message, word for word; each good one is
accepted, with the sizes its caller reads."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from shared import Rotary, Variant, validation
from shared.variants import ARRAY_FIELDS, CORE_FIELDS, STATIC_FIELDS

pytestmark = pytest.mark.neutral  # once, in the jax env (docs/suite.md)

BIASES = ("b_q", "b_k", "b_v", "b_o")


class Tensor:
    """Stands in for a torch tensor (the NumPy suite has no torch): the
    framework check reads only the type's module, and refuses it before it
    reads anything else."""

    __module__ = "torch"


def ones(*shape, dtype="float64"):
    return np.ones(shape, dtype=dtype)


def call(check, args, framework="numpy"):
    """validation.<check> on `args` given flat (the biases and the variant's
    fields by name, block_size and causal beside them), as the checks take
    them: biases=, variant=Variant(...), a flash's settings; the sizes."""
    args = dict(args)
    biases = {n: args.pop(n) for n in BIASES if n in args}
    fields = ("n_kv_heads", "window", "softcap")
    variant = {n: args.pop(n) for n in fields if n in args}
    more = dict(biases=biases) if biases else {}
    if variant:
        more["variant"] = Variant(**variant)
    if check == "check_multi_head_flash":
        given = {n: args.pop(n) for n in ("block_size", "causal") if n in args}
        defaults = dict(block_size=4, causal=True, scale=True, interpret=None)
        args["settings"] = defaults | given
    found = getattr(validation, check)(**args, **more, framework=framework)
    return found[0] if isinstance(found, tuple) and len(found) == 2 else found


# tile_size and the kernels' sizes


@pytest.mark.parametrize(
    ("n", "tile"),
    [(1, 16), (15, 16), (16, 16), (17, 32), (100, 128), (128, 128), (129, 256)],
)
def test_tile_size_is_n_rounded_up_to_a_power_of_two_at_least_16(n, tile):
    assert validation.tile_size(n) == tile


@pytest.mark.parametrize(("block_size", "D"), [(1, 4), (2, 256), (16, 1), (64, 64)])
def test_every_power_of_two_block_and_a_head_width_up_to_256_are_accepted(
    block_size, D
):
    assert validation.check_kernel_sizes(block_size, D) == block_size


# check_flash: q, k, v (..., T, D), a key mask (..., 1, T), block_size


def flash_args(batch=(2,), T=5, D=4):
    return dict(q=ones(*batch, T, D), k=ones(*batch, T, D), v=ones(*batch, T, D))


@pytest.mark.parametrize("mask_shape", [None, (5,), (1, 5), (2, 1, 5), (1, 1, 5)])
def test_check_flash_accepts_every_key_mask_and_returns_the_sizes(mask_shape):
    mask = None if mask_shape is None else ones(*mask_shape, dtype=bool)
    dims = call("check_flash", flash_args() | dict(mask=mask, block_size=4))
    assert (dims.batch, dims.T, dims.D) == ((2,), 5, 4)  # what the kernels read


def test_check_flash_takes_the_variants():
    """GQA (q (..., H, T, D), k and v (..., H_kv, T, D)), a window and a soft-cap."""
    q, k = ones(3, 4, 5, 8), ones(3, 2, 5, 8)  # H = 4 query heads, H_kv = 2
    variant = Variant(n_kv_heads=2, window=3, softcap=30.0)
    dims, _ = validation.check_flash(
        q, k, k, None, 4, variant=variant, framework="numpy"
    )
    assert (dims.batch, dims.T, dims.D) == ((3, 4), 5, 8)  # q's sizes


BAD_FLASH = [
    (
        dict(block_size=12),
        ValueError,
        "block_size must be a power of two (a kernel's tiles are), got 12",
    ),
    (dict(block_size=0), ValueError, "block_size must be a positive integer, got 0"),
    (
        dict(D=300),
        ValueError,
        "head width D = 300 is more than the flash kernels take (at most 256): use "
        "more heads, or blockwise_attention",
    ),
    (
        dict(D=257),
        ValueError,
        "head width D = 257 is more than the flash kernels take (at most 256): use "
        "more heads, or blockwise_attention",
    ),
    (
        dict(batch=(), mask=ones(5, 5, dtype=bool)),
        ValueError,
        "mask of shape (5, 5) is not a key mask: the flash kernels take (..., 1, T) = "
        "(1, 5), one row of keys for every query (as key_padding_mask makes), never a "
        "(T, T) mask",
    ),
    (
        dict(mask=ones(2, 5, 5, dtype=bool)),
        ValueError,
        "mask of shape (2, 5, 5) is not a key mask: the flash kernels take (..., 1, T) "
        "= (2, 1, 5), one row of keys for every query (as key_padding_mask makes), "
        "never a (T, T) mask",
    ),
    (
        dict(mask=ones(1, 5)),
        ValueError,
        "mask must be a boolean array (True = may attend), got dtype float64",
    ),
    (
        dict(mask=[[True] * 5]),
        TypeError,
        "mask must be a boolean array (True = may attend), got list",
    ),
    (
        dict(batch=(), mask=ones(1, 6, dtype=bool)),
        ValueError,
        "mask of shape (1, 6) does not broadcast to (..., T, T) = (5, 5)",
    ),
    (
        dict(mask=ones(3, 1, 5, dtype=bool)),
        ValueError,
        "mask of shape (3, 1, 5) does not broadcast to (..., T, T) = (2, 5, 5)",
    ),
    (
        dict(q=[[1.0] * 4] * 5),
        TypeError,
        "q must be an array with .shape and .dtype, got list",
    ),
    (
        dict(batch=(), n_kv_heads=1),
        ValueError,
        "with n_kv_heads, q must have shape (..., H, T, D) with rank >= 3, got (5, 4)",
    ),
    (
        dict(n_kv_heads=1, k=ones(1, 5, 4, dtype=np.float32)),
        ValueError,
        "q has dtype float64 but k has dtype float32; give q, k and v one dtype",
    ),
    (
        dict(softcap=True),
        ValueError,
        "softcap must be a positive number (scores are capped to (-softcap, "
        "softcap)), got True",
    ),
]


@pytest.mark.parametrize(
    ("change", "error", "message"),
    BAD_FLASH,
    ids=[m.split(":")[0][:40] for _, _, m in BAD_FLASH],
)
def test_bad_flash_input_raises_the_same_message(change, error, message):
    change = dict(change)
    sizes = {n: change.pop(n) for n in ("batch", "D") if n in change}
    args = flash_args(**sizes) | dict(mask=None, block_size=4) | change
    with pytest.raises(error) as raised:
        call("check_flash", args)
    assert str(raised.value) == message


# check_multi_head_flash: x (..., T, C), the weights, n_heads, a key mask
# (..., H, 1, T), block_size


def multi_head_args(batch=(2,), T=6, C=8):
    rng = np.random.default_rng(0)
    weights = {n: rng.standard_normal((C, C)) for n in ("w_q", "w_k", "w_v", "w_o")}
    biases = {n: rng.standard_normal(C) for n in BIASES}
    return dict(x=ones(*batch, T, C), **weights, n_heads=2, **biases)


@pytest.mark.parametrize("mask_shape", [None, (6,), (2, 1, 1, 6), (2, 2, 1, 6)])
def test_check_multi_head_flash_accepts_every_key_mask_and_returns_h(mask_shape):
    mask = None if mask_shape is None else ones(*mask_shape, dtype=bool)
    dims = call("check_multi_head_flash", multi_head_args() | dict(mask=mask))
    assert dims.H == 2  # what the kernels read


BAD_MULTI_HEAD_FLASH = [
    (dict(n_heads=3), "n_heads=3 does not divide d_model=8"),
    (
        dict(mask=ones(2, 1, 6, 6, dtype=bool)),
        "mask of shape (2, 1, 6, 6) is not a key mask: the flash kernels take "
        "(..., H, 1, T) = (2, 2, 1, 6), one row of keys for every query (as "
        "key_padding_mask makes), never a (T, T) mask",
    ),
    (
        dict(mask=ones(2, 3, 1, 6, dtype=bool)),
        "mask of shape (2, 3, 1, 6) does not broadcast to (..., H, T, T) = "
        "(2, 2, 6, 6)",
    ),
    (
        dict(mask=ones(2, 2, 1, 6)),
        "mask must be a boolean array (True = may attend), got dtype float64",
    ),
    (dict(b_k=ones(4)), "b_k must have shape (C,) = (8,), got (4,)"),
    (
        dict(block_size=3),
        "block_size must be a power of two (a kernel's tiles are), got 3",
    ),
    (
        dict(C=600),  # D = C / H = 300
        "head width D = 300 is more than the flash kernels take (at most 256): use "
        "more heads, or blockwise_attention",
    ),
    (
        dict(n_kv_heads=1),  # w_k and w_v (8, 8): two KV heads' width
        "w_k must have shape (C, n_kv_heads * D) = (8, 4) for n_heads=2, "
        "n_kv_heads=1, head width D = 4, got (8, 8)",
    ),
    (
        dict(window=2, causal=False),
        "window needs causal=True: a sliding window is the W keys up to each query",
    ),
]


@pytest.mark.parametrize(
    ("change", "message"),
    BAD_MULTI_HEAD_FLASH,
    ids=[m.split(":")[0][:40] for _, m in BAD_MULTI_HEAD_FLASH],
)
def test_bad_multi_head_flash_input_raises_the_same_message(change, message):
    change = dict(change)
    args = multi_head_args(C=change.pop("C", 8)) | dict(mask=None, block_size=4)
    with pytest.raises(ValueError) as raised:
        call("check_multi_head_flash", args | change)
    assert str(raised.value) == message


# check_interpret: None means compiled on a GPU, interpreted elsewhere


@pytest.mark.parametrize(
    ("interpret", "on_gpu", "interpreted"),
    [
        (None, False, True),
        (None, True, False),
        (True, False, True),
        (True, True, True),
        (False, True, False),
    ],
)
def test_check_interpret_says_whether_to_interpret(interpret, on_gpu, interpreted):
    answer = validation.check_interpret(
        interpret, on_gpu=on_gpu, where="cuda", language="Triton"
    )
    assert answer is interpreted


@pytest.mark.parametrize(
    ("interpret", "message"),
    [
        ("yes", "interpret must be None, True or False, got 'yes'"),
        (1, "interpret must be None, True or False, got 1"),
        (
            False,
            "interpret=False compiles the Pallas kernel for a GPU, but the arrays are "
            "on cpu: pass interpret=True (or None) to run it in the interpreter, or "
            "put them on a GPU",
        ),
    ],
)
def test_bad_interpret_raises_the_same_message(interpret, message):
    with pytest.raises(ValueError) as raised:
        validation.check_interpret(
            interpret, on_gpu=False, where="cpu", language="Pallas"
        )
    assert str(raised.value) == message


@pytest.mark.parametrize(
    ("block_size", "D", "precision", "message"),
    [
        (16, 64, "bfloat16", None),
        (128, 128, "bfloat16", None),
        (64, 256, "float16", None),
        (64, 64, "float64", None),
        (
            8,
            64,
            "bfloat16",
            "block_size=8 is too small for the compiled kernel: a GPU's matrix units "
            "multiply at least 16 rows; use 16 or more (the interpreter takes any "
            "power of two)",
        ),
        (
            128,
            100,
            "float32",
            "block_size=128 with head width D = 100 makes a (128, 128) tile of "
            "float32, more than the compiled kernel keeps on chip (32 KiB a tile): "
            "use block_size=64 or smaller",
        ),
    ],
)
def test_the_compiled_kernels_tile_limits(block_size, D, precision, message):
    if message is None:
        validation.check_compiled_tile(block_size, D, precision)
        return
    with pytest.raises(ValueError) as raised:
        validation.check_compiled_tile(block_size, D, precision)
    assert str(raised.value) == message


# Sharded attention: the layout's sizes, and one device's arguments


@pytest.mark.parametrize(("T", "n_devices"), [(2, 1), (8, 4), (9, 4)])
def test_the_zigzag_layout_takes_t_of_at_least_2n(T, n_devices):
    assert validation.check_sequence_shards(T, n_devices) == n_devices


@pytest.mark.parametrize(("n_heads", "n_devices", "local"), [(8, 4, 2), (4, 4, 1)])
def test_the_heads_strategy_gives_each_device_h_over_n_heads(n_heads, n_devices, local):
    assert validation.check_head_shards(n_heads, n_devices) == local


@pytest.mark.parametrize(
    ("check", "message"),
    [
        (
            lambda: validation.check_sequence_shards(7, 4),
            "the zigzag layout cuts the sequence into 2 * n_devices = 8 chunks, two "
            "per device, so it needs T >= 8; got T = 7",
        ),
        (
            lambda: validation.check_head_shards(8, 3),
            "n_devices=3 does not divide n_heads=8; the heads strategy gives each "
            "device n_heads / n_devices whole heads",
        ),
        (
            lambda: validation.check_sequence_shards(8, 0),
            "n_devices must be a positive integer, got 0",
        ),
        (
            lambda: validation.check_head_shards(8, True),
            "n_devices must be a positive integer, got True",
        ),
    ],
    ids=["T < 2N", "N does not divide H", "N = 0", "N a bool"],
)
def test_bad_device_counts_raise_the_same_message(check, message):
    with pytest.raises(ValueError) as raised:
        check()
    assert str(raised.value) == message


def test_check_sharded_returns_the_sizes_of_one_devices_rows():
    args = multi_head_args(batch=(2,), T=6) | dict(keep=ones(2, 6, dtype=bool))
    dims = call("check_sharded", args)
    assert (dims.C, dims.H) == (8, 2)  # what head_parallel_attention reads


BAD_SHARDED = [
    (
        dict(keep=ones(2, 6)),
        ValueError,
        "keep must be a boolean array (..., R) = (2, 6) (True = a real key), got "
        "float64 (2, 6); take x and keep from shard_sequence",
    ),
    (
        dict(keep=ones(2, 5, dtype=bool)),
        ValueError,
        "keep must be a boolean array (..., R) = (2, 6) (True = a real key), got "
        "bool (2, 5); take x and keep from shard_sequence",
    ),
    (
        dict(keep=[[True] * 6] * 2),
        TypeError,
        "keep must be an array with .shape and .dtype, got list",
    ),
    (
        dict(x=ones(2, 5, 8), keep=ones(2, 5, dtype=bool)),
        ValueError,
        "x holds R = 5 rows on this device, but the zigzag layout gives every device "
        "two chunks of equal length: take x from shard_sequence",
    ),
    (dict(b_o=ones(4)), ValueError, "b_o must have shape (C,) = (8,), got (4,)"),
    (dict(n_heads=3), ValueError, "n_heads=3 does not divide d_model=8"),
]


@pytest.mark.parametrize(
    ("change", "error", "message"),
    BAD_SHARDED,
    ids=[m.split(";")[0][:40] for _, _, m in BAD_SHARDED],
)
def test_bad_sharded_input_raises_the_same_message(change, error, message):
    args = multi_head_args(batch=(2,), T=6) | dict(keep=ones(2, 6, dtype=bool))
    with pytest.raises(error) as raised:
        call("check_sharded", args | change)
    assert str(raised.value) == message


# Arrays of another framework: every argument of every check


def decode_step_args():
    args = multi_head_args(batch=(), T=1)
    args["x_t"] = args.pop("x")[0]  # (C,)
    cache = SimpleNamespace(k=ones(2, 4, 4), v=ones(2, 4, 4), length=np.array(0))
    return args | dict(cache=cache)


def single_head_args():
    args = multi_head_args() | dict(mask=ones(2, 6, 6, dtype=bool))
    del args["w_o"], args["n_heads"], args["b_o"]
    return args


GOOD_ARGS = {
    "check_single_head": single_head_args,
    "check_multi_head": lambda: (
        multi_head_args() | dict(mask=ones(2, 2, 6, 6, dtype=bool))
    ),
    "check_weights": lambda: dict(weights=ones(2, 6, 6)),
    "check_key_padding": lambda: dict(lengths_or_keep=np.array([3, 6]), T=6),
    "check_d_out": lambda: dict(
        d_out=ones(2, 6, 8), x=ones(2, 6, 8), out_shape=(2, 6, 8), legend="(..., T, C)"
    ),
    "check_decode_step": decode_step_args,
    "check_blockwise": lambda: flash_args() | dict(block_size=4),
    "check_flash": lambda: (
        flash_args() | dict(mask=ones(2, 1, 5, dtype=bool), block_size=4)
    ),
    "check_multi_head_flash": lambda: (
        multi_head_args() | dict(mask=ones(2, 1, 1, 6, dtype=bool), block_size=4)
    ),
    "check_sharded": lambda: multi_head_args() | dict(keep=ones(2, 6, dtype=bool)),
}


def of_module(module: str):
    """An object whose type lives in `module`, as torch's and JAX's arrays do."""
    return type("Array", (), {"__module__": module})()


@pytest.mark.parametrize(
    ("array", "framework"),
    [
        (np.ones(2), "numpy"),
        (np.float64(1.0), "numpy"),
        (of_module("torch"), "torch"),  # torch.Tensor
        (of_module("torch._subclasses.fake_tensor"), "torch"),  # under compile
        (of_module("jaxlib._jax"), "jax"),  # a JAX array
        (of_module("jax._src.interpreters.partial_eval"), "jax"),  # a tracer
        ([1.0], None),
        (SimpleNamespace(shape=(2,), dtype="float64"), None),
        (of_module("numpyro.x"), None),
    ],
)
def test_framework_of_reads_the_framework_from_the_type(array, framework):
    assert validation.framework_of(array) == framework


def array_names(args: dict) -> list[str]:
    """The names the framework check gives the arrays of `args` (check_d_out's
    x is the forward's, whose own check has seen it)."""
    names = [name for name, value in args.items() if hasattr(value, "dtype")]
    if "d_out" in args:
        names.remove("x")
    if "cache" in args:
        names += ["cache.k", "cache.v", "cache.length"]
    return names


@pytest.mark.parametrize("check", GOOD_ARGS)
def test_the_good_arguments_pass(check):
    call(check, GOOD_ARGS[check]())


@pytest.mark.parametrize(
    ("check", "name"),
    [
        (check, name)
        for check, args in GOOD_ARGS.items()
        for name in array_names(args())
    ],
)
def test_an_array_of_another_framework_is_refused_naming_the_converter(check, name):
    args = GOOD_ARGS[check]()
    if name.startswith("cache."):
        setattr(args["cache"], name.removeprefix("cache."), Tensor())
    else:
        args[name] = Tensor()
    with pytest.raises(TypeError) as raised:
        call(check, args)
    assert str(raised.value) == (
        f"{name} is a torch tensor, but impl_numpy computes on NumPy arrays: convert "
        f"it with impl_torch.to_numpy({name})"
    )


@pytest.mark.parametrize("H", [1, 2])
def test_the_flash_kernels_refuse_sinks_whatever_their_values(H):
    """Whether the sinks are given, never their values: zero sinks of one head
    are refused as any are (the kernels compute none), before any compute."""
    args = multi_head_args() | dict(n_heads=H, mask=None)
    biases = {n: args.pop(n) for n in BIASES}
    settings = dict(block_size=4, causal=True)
    for zero_sinks in (Variant(sinks=np.zeros(H)), Variant(alibi=True)):
        given = "sinks" if zero_sinks.sinks is not None else "alibi"
        with pytest.raises(ValueError) as raised:
            validation.check_multi_head_flash(
                **args, settings=settings, biases=biases, variant=zero_sinks
            )
        assert str(raised.value) == (
            f"the flash kernels do not take the variant's {given}: use blockwise "
            "attention, which does"
        )
        q = np.ones((2, H, 5, 4))
        with pytest.raises(ValueError) as raised:
            validation.check_flash(q, q, q, None, 4, variant=zero_sinks)
        assert str(raised.value).startswith("the flash kernels do not take")


NON_PLAIN = dict(
    n_kv_heads=1, head_dim=4, rotary=Rotary(), window=2, alibi=True, softcap=5.0,
    qk_norm_eps=1e-5, positions=np.arange(5), sinks=np.zeros(2),
    q_norm=np.ones(4), k_norm=np.ones(4),
)  # fmt: skip
"""A value away from plain attention's for every field of a Variant."""


def test_a_per_head_core_takes_the_core_fields_and_refuses_the_rest_by_name():
    """`for_core` keeps CORE_FIELDS and nothing else, and blockwise attention
    refuses each other field, naming it and the multi-head form that takes
    it, so that a new field of CORE_FIELDS reaches every core by itself."""
    assert set(NON_PLAIN) == set(STATIC_FIELDS) | set(ARRAY_FIELDS)
    core = Variant(**NON_PLAIN).for_core()
    assert set(core.given) == set(CORE_FIELDS)
    assert set(Variant(**NON_PLAIN).for_core(grouped=True).given) == {
        *CORE_FIELDS,
        "n_kv_heads",
    }
    q = np.ones((2, 5, 4))
    for name in set(NON_PLAIN) - set(CORE_FIELDS):
        with pytest.raises(ValueError) as raised:
            validation.check_blockwise_variant(
                q, True, Variant(**{name: NON_PLAIN[name]})
            )
        assert str(raised.value) == (
            f"blockwise_attention takes the variant's {', '.join(CORE_FIELDS)}, "
            f"not {name}: the rest acts on the heads before it, as "
            "multi_head_blockwise_attention does"
        )


def test_the_flash_kernels_refuse_each_core_field_they_do_not_compute(monkeypatch):
    """What the kernels refuse follows FLASH_CHOICES: a core field dropped from
    it is refused by name, with no line of its own."""
    from shared.validation import kernels

    q = np.ones((2, 5, 4))
    validation.check_flash(q, q, q, None, 4, variant=Variant(softcap=5.0))
    monkeypatch.setattr(kernels, "FLASH_CHOICES", ("n_kv_heads", "window"))
    with pytest.raises(ValueError) as raised:
        validation.check_flash(q, q, q, None, 4, variant=Variant(softcap=5.0))
    assert str(raised.value) == (
        "the flash kernels do not take the variant's softcap: use blockwise "
        "attention, which does"
    )
