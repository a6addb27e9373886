"""Moving arrays in and out of this backend; NumPy arrays are already ours."""

from __future__ import annotations

import numpy as np

from shared.dtypes import np_dtype

FRAMEWORK = "numpy"
"""The arrays this backend computes on (shared.validation.FRAMEWORKS)."""


def from_numpy(array, dtype=None):
    """A NumPy array as this backend's array, cast to `dtype` (a name) if given."""
    return np.array(array, dtype=None if dtype is None else np_dtype(dtype))


def to_numpy(array):
    """This backend's array as a NumPy array."""
    return np.asarray(array)
