"""NumPy arrays in and out of the array API's (what every backend reads)."""

import array_api_strict as xp
import numpy as np

FRAMEWORK = "array_api"


def from_numpy(array, dtype=None):
    """A NumPy array as an array API array, cast to dtype (a name) if given."""
    found = xp.asarray(np.asarray(array))
    return found if dtype is None else xp.astype(found, getattr(xp, dtype))


def to_numpy(array):
    """An array API array as a NumPy array (through DLPack, as the standard
    says arrays leave a library)."""
    return np.from_dlpack(array)
