"""Moving arrays in and out of this backend: NumPy arrays <-> JAX arrays."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np


def from_numpy(array, dtype=None):
    """A NumPy array as a JAX array, cast to `dtype` (a name) if given."""
    return jnp.asarray(
        np.asarray(array), dtype=None if dtype is None else jnp.dtype(dtype)
    )


def to_numpy(array):
    """A JAX array as a NumPy array (bfloat16 stays bfloat16, via ml_dtypes)."""
    return np.asarray(array)
