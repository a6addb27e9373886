"""Moving arrays in and out of this backend: NumPy arrays <-> JAX arrays; and
JAX's 64-bit switch, which this package never turns on (docs/contract.md)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

FRAMEWORK = "jax"
"""The arrays this backend computes on (shared.validation.FRAMEWORKS)."""


def from_numpy(array, dtype=None):
    """A NumPy array as a JAX array, cast to `dtype` (a name) if given.

    Cast and copied on the host, as jnp.asarray casts, then put on the device:
    the same bits, without the XLA program that jnp.asarray compiles for each
    new shape and dtype (an identity), and sharing no memory with the array
    given, which jax.device_put of that array itself may on the CPU."""
    array = np.asarray(array)
    require_x64_for(array.dtype if dtype is None else dtype)
    wanted = array.dtype if dtype is None else jnp.dtype(dtype)
    return jax.device_put(np.array(array, dtype=wanted))


def to_numpy(array):
    """A JAX array as a NumPy array (bfloat16 stays bfloat16, via ml_dtypes)."""
    return np.asarray(array)


def require_x64_for(dtype):
    """Raise ValueError for float64 while JAX's x64 mode is off: JAX would
    compute in float32 instead, without a word."""
    float64 = jnp.dtype("float64")
    x64_off = jax.dtypes.canonicalize_dtype(float64) != float64
    if x64_off and jnp.dtype(dtype) == float64:
        raise ValueError(
            "float64 in JAX needs 64-bit mode, which is off (JAX would compute in "
            "float32): run jax.config.update('jax_enable_x64', True) at the start "
            "of the program, or set JAX_ENABLE_X64=1"
        )
