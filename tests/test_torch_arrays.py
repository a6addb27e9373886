"""impl_torch/arrays.py: from_numpy's device, checked on a CPU-only machine.
Under a default device of "meta" (shapes, no numbers), device="cpu" must give
a CPU tensor holding the array's numbers, in the dtype asked for; without it,
the tensor follows the default device. (from_numpy's dtype in every backend:
tests/test_backend.py; tests/test_options.py registers both.)"""

from __future__ import annotations

import numpy as np
import torch

import impl_torch


def test_from_numpy_takes_a_device():
    a = np.random.default_rng(43).standard_normal((3, 4))
    with torch.device("meta"):
        found = impl_torch.from_numpy(a, "float32", device="cpu")
        also = impl_torch.from_numpy(a, device=torch.device("cpu"))
        assert impl_torch.from_numpy(a).device.type == "meta"
    assert found.device.type == also.device.type == "cpu"
    assert found.dtype == torch.float32 and also.dtype == torch.float64
    np.testing.assert_array_equal(found.numpy(), a.astype(np.float32))
    np.testing.assert_array_equal(also.numpy(), a)
