"""The checks of the flash-attention kernels (impl_torch/kernel.py,
impl_jax/kernel.py): docs/kernels.md says where each limit comes from."""

from __future__ import annotations

from shared.dtypes import np_dtype
from shared.validation.arrays import (
    as_int,
    check_array,
    check_float,
    check_frameworks,
    shape_of,
)
from shared.validation.attention import (
    check_mask,
    check_multi_head,
    check_variant_type,
)
from shared.validation.blockwise import (
    check_block_size,
    check_blockwise,
    check_blockwise_variant,
    check_window,
)
from shared.validation.variants import check_kv_heads
from shared.variants import CORE_FIELDS

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


FLASH_SETTINGS = ("block_size", "causal", "scale", "interpret")
"""The keywords of `flash_attention` that its multi-head form passes on."""
FLASH_CHOICES = ("n_kv_heads", "window", "softcap")
"""The choices of a Variant that the kernels compute themselves."""


def check_flash(
    q, k, v, mask, block_size, *, causal=True, variant=None, framework=None
):
    """Validate the arguments of `flash_attention`; return q's sizes (H = 1)
    and the variant, or None for plain attention.

    Args:
        variant: None, or a Variant of n_kv_heads (q (..., H, T, D), k and v
            (..., H_kv, T, D), H a multiple of H_kv: GQA), window and softcap.

    Raises:
        TypeError: as `check_blockwise`, or a mask that is not an array.
        ValueError: as `check_blockwise` and `check_blockwise_variant`; a mask
            that is not a boolean key mask (..., 1, T); block_size not a power
            of two; D over MAX_HEAD_WIDTH; k and v without the n_kv_heads heads.
    """
    n_kv_heads = check_variant_type(variant).n_kv_heads
    if n_kv_heads is None:
        dims = check_blockwise(q, k, v, block_size, framework=framework)
    else:
        dims = check_blockwise(q, q, q, block_size, framework=framework)
        check_frameworks(framework, k=k, v=v)
        check_kv_heads_of(q, k, v, n_kv_heads)
    check_frameworks(framework, mask=mask)
    check_key_mask(mask, (*dims.batch, 1, dims.T), "(..., 1, T)")
    check_kernel_sizes(block_size, dims.D)
    check_unsupported(variant)
    variant = check_blockwise_variant(
        q, causal, variant, framework=framework, core="flash_attention",
        takes=FLASH_CHOICES,
    )  # fmt: skip
    return dims, variant


def check_unsupported(variant) -> None:
    """Raise ValueError for what the variant gives that a per-head core applies
    (CORE_FIELDS) and the kernels do not compute (FLASH_CHOICES): ALiBi and
    sinks today. (Whether the sinks are given, never their values.)"""
    if variant is None:
        return
    given = check_variant_type(variant).given
    names = [n for n in CORE_FIELDS if n in given and n not in FLASH_CHOICES]
    if names:
        raise ValueError(
            f"the flash kernels do not take the variant's {' or '.join(names)}: "
            "use blockwise attention, which does"
        )


def check_kv_heads_of(q, k, v, n_kv_heads) -> None:
    """k and v (..., H_kv, T, D) in q's dtype for q (..., H, T, D), H_kv =
    n_kv_heads dividing H."""
    shape = shape_of(q)
    if len(shape) < 3:
        raise ValueError(
            "with n_kv_heads, q must have shape (..., H, T, D) with rank >= 3, "
            f"got {shape}"
        )
    H_kv = check_kv_heads(shape[-3], as_int(n_kv_heads))
    expected = (*shape[:-3], H_kv, *shape[-2:])
    for name, array in (("k", k), ("v", v)):
        check_float(array, name)
        if shape_of(array) != expected:
            raise ValueError(
                f"{name} has shape {tuple(array.shape)} but q has {shape}: with "
                f"n_kv_heads={H_kv}, k and v must have shape (..., n_kv_heads, T, "
                f"D) = {expected}"
            )
        check_array(array, name, like=("q", q), together="q, k and v")


def check_multi_head_flash(
    x, w_q, w_k, w_v, w_o, n_heads, mask, settings, *, biases=None, variant=None,
    framework=None,
):  # fmt: skip
    """Validate the arguments of `multi_head_flash_attention`; return their
    sizes and the variant, or None for plain attention.

    Args:
        settings: the keywords given for `flash_attention` (FLASH_SETTINGS),
            with their defaults.

    Raises:
        TypeError: as `check_multi_head`; a setting flash_attention has not.
        ValueError: as `check_multi_head`, as `check_flash` for the mask
            (..., H, 1, T), block_size and the head width, and for the
            variant's window; ALiBi or sinks, which the kernels do not compute.
    """
    unknown = [name for name in settings if name not in FLASH_SETTINGS]
    if unknown:
        raise TypeError(
            f"multi_head_flash_attention passes flash_attention's "
            f"{', '.join(FLASH_SETTINGS)}; {unknown[0]!r} is not one of them"
        )
    dims, variant = check_multi_head(
        x, w_q, w_k, w_v, w_o, n_heads, biases=biases, variant=variant,
        framework=framework,
    )  # fmt: skip
    check_frameworks(framework, mask=mask)
    check_key_mask(mask, (*dims.batch, dims.H, 1, dims.T), "(..., H, 1, T)")
    check_kernel_sizes(settings["block_size"], dims.D)
    check_unsupported(variant)
    check_window(getattr(variant, "window", None), settings["causal"])
    return dims, variant


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


def check_key_mask(mask, target: tuple[int, ...], legend: str) -> None:
    """None, or a boolean mask that broadcasts to `target`, one row of keys."""
    if mask is None:
        return
    T = target[-1]
    check_mask(mask, (*target[:-2], T, T), legend.replace("1, T", "T, T"))
    shape = tuple(int(n) for n in mask.shape)
    if len(shape) >= 2 and shape[-2] != 1:
        raise ValueError(
            f"mask of shape {shape} is not a key mask: the flash kernels take "
            f"{legend} = {target}, one row of keys for every query (as "
            "key_padding_mask makes), never a (T, T) mask"
        )
