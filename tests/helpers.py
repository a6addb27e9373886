"""Small helpers the test bodies share: run a backend on NumPy inputs, get NumPy back."""

from __future__ import annotations

import numpy as np

from shared.golden import load_golden

PARAM_NAMES = ("w_q", "w_k", "w_v", "w_o")


def name_of(backend) -> str:
    """'numpy' for the module impl_numpy."""
    return backend.__name__.removeprefix("impl_")


def golden(preset_name: str) -> dict[str, np.ndarray]:
    """The committed oracle results of a preset (cached)."""
    if preset_name not in _GOLDEN:
        _GOLDEN[preset_name] = load_golden(preset_name)
    return _GOLDEN[preset_name]


_GOLDEN: dict[str, dict[str, np.ndarray]] = {}


def run_single(backend, x, w_q, w_k, w_v, dtype, mask=None, scale=True):
    """single_head_attention on NumPy inputs cast to `dtype`; NumPy (out, weights)."""
    args = [backend.from_numpy(a, dtype) for a in (x, w_q, w_k, w_v)]
    mask = None if mask is None else backend.from_numpy(mask)
    out, weights = backend.single_head_attention(*args, mask, scale=scale)
    return backend.to_numpy(out), backend.to_numpy(weights)


def run_multi(backend, x, params, n_heads, dtype, mask=None, scale=True):
    """multi_head_attention on NumPy inputs cast to `dtype`; NumPy (out, weights)."""
    args = [
        backend.from_numpy(a, dtype) for a in (x, *(params[k] for k in PARAM_NAMES))
    ]
    mask = None if mask is None else backend.from_numpy(mask)
    out, weights = backend.multi_head_attention(*args, n_heads, mask, scale=scale)
    return backend.to_numpy(out), backend.to_numpy(weights)


def run_entropy(backend, weights, dtype):
    """attention_entropy on NumPy weights cast to `dtype`; NumPy result."""
    return backend.to_numpy(
        backend.attention_entropy(backend.from_numpy(weights, dtype))
    )


def random_inputs(seed, batch, T, C, D=None):
    """x (*batch, T, C) and (C, D) projections w_q, w_k, w_v, w_o, float64."""
    rng = np.random.default_rng(seed)
    D = C if D is None else D
    x = rng.standard_normal((*batch, T, C))
    params = {name: rng.standard_normal((C, D)) / np.sqrt(C) for name in PARAM_NAMES}
    params["w_o"] = rng.standard_normal((C, C)) / np.sqrt(C)
    return x, params
