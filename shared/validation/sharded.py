"""The checks of impl_*/sharded.py (docs/sharding.md): device counts, the
zigzag layout, and one device's arguments."""

from __future__ import annotations

from shared.dtypes import dtype_name
from shared.validation.arrays import (
    Dims,
    check_array,
    check_frameworks,
    check_positive_int,
)
from shared.validation.attention import check_multi_head


def check_n_devices(n_devices) -> int:
    """n_devices must be a positive int; return it."""
    return check_positive_int("n_devices", n_devices)


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
    x, w_q, w_k, w_v, w_o, n_heads, keep, *, biases=None, framework=None
) -> Dims:
    """Validate one device's arguments of `ring_attention` or
    `head_parallel_attention`: x (..., R, C), the rows of `shard_sequence`
    (R = 2c, two chunks), and keep (..., R) bool. Return the sizes, T = R.

    Raises:
        TypeError, ValueError: as `check_multi_head`, and for a keep that is
            not a bool array of x's shape without C, or an odd R.
    """
    dims, _ = check_multi_head(
        x, w_q, w_k, w_v, w_o, n_heads, biases=biases, framework=framework
    )
    check_frameworks(framework, keep=keep)
    shape = check_array(keep, "keep")
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
