"""Moving arrays in and out of this backend: NumPy arrays <-> torch tensors."""

from __future__ import annotations

import numpy as np
import torch


def from_numpy(array, dtype=None, device=None):
    """A NumPy array as a torch tensor, cast to `dtype` (a name) if given."""
    tensor = torch.from_numpy(np.array(array))
    return tensor.to(
        device=device, dtype=None if dtype is None else getattr(torch, dtype)
    )


def to_numpy(tensor):
    """A torch tensor as a NumPy array (bfloat16, which NumPy lacks, as float32)."""
    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.float()
    return tensor.numpy()
