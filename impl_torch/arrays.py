"""Moving arrays in and out of this backend: NumPy arrays <-> torch tensors."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

FRAMEWORK = "torch"
"""The arrays this backend computes on (shared.validation.FRAMEWORKS)."""


def from_numpy(array, dtype=None, *, device=None):
    """A NumPy array as a torch tensor, cast to `dtype` (a name) if given, on
    `device` (a name or torch.device; default: torch's default device, the CPU
    unless `torch.set_default_device` chose another, as `pytest --device` does).

    NumPy's bfloat16 (from `ml_dtypes`), which torch cannot read, goes through
    float32: every bfloat16 is a float32, so nothing rounds.
    """
    array = np.array(array)
    if array.dtype == ml_dtypes.bfloat16:
        tensor = torch.from_numpy(array.astype(np.float32)).to(torch.bfloat16)
    else:
        tensor = torch.from_numpy(array)
    return tensor.to(
        device=torch.get_default_device() if device is None else device,
        dtype=None if dtype is None else getattr(torch, dtype),
    )


def to_numpy(array):
    """A torch tensor as a NumPy array (bfloat16 stays bfloat16, via ml_dtypes).

    torch cannot hand NumPy a bfloat16 array, so it goes through float32: exact.
    """
    tensor = array.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        return tensor.float().numpy().astype(ml_dtypes.bfloat16)
    return tensor.numpy()
