"""Dtype names that mean the same in every backend: 'float32' for NumPy's,
torch's and JAX's float32 alike. The tolerance table, the validation and every
`from_numpy` key on these names."""

from __future__ import annotations

import functools

import numpy as np

FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")


def dtype_key(dtype) -> str:
    """'float32' for the name 'float32', np.float32, jnp.float32, torch.float32
    or any library's dtype that prints as its module and its name."""
    try:
        return _remembered_key(dtype)  # every check of every argument asks
    except TypeError:  # an unhashable dtype (none of the frameworks' is)
        return _key(dtype)


def _key(dtype) -> str:
    text = str(dtype)
    if isinstance(dtype, str) or text.startswith("torch."):
        return text.removeprefix("torch.")
    try:
        return np.dtype(dtype).name
    except TypeError:
        return text.rpartition(".")[2]


_remembered_key = functools.cache(_key)
"""_key of each dtype once: str() of a NumPy dtype takes microseconds, and
validation asks for every argument of every call (800,000 times in the
NumPy env's tests)."""


def dtype_name(array) -> str:
    """The dtype name of a NumPy, JAX or torch array (reads only `.dtype`)."""
    return dtype_key(array.dtype)


def np_dtype(name: str) -> np.dtype:
    """The NumPy dtype of a name; bfloat16 comes from `ml_dtypes`."""
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)
