"""The machine's matrix-multiply peak, measured in the same run as the modes:
float32 (n, n) @ (n, n) in every framework the run uses, timed by the same
clock; the best is the peak that `% of peak` divides by."""

from __future__ import annotations

from typing import Any

import numpy as np

from triptych.bench.config import TimeConfig
from triptych.bench.modes import MODES
from triptych.bench.modes.runners import jax_device
from triptych.bench.problem import SEED
from triptych.bench.timing import gemm_flops, measure


def gemm_peak(config: TimeConfig, skipped: dict[str, str]) -> dict[str, Any]:
    """float32 (n, n) @ (n, n) GFLOP/s of each framework here; the best is the peak.

    NumPy counts only on a CPU run; torch and JAX on the run's device.
    """
    n = config.gemm_size
    rng = np.random.default_rng(SEED)
    a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    frameworks = {MODES[m].framework for m in config.modes if m not in skipped}
    if config.device == "cpu":
        frameworks.add("numpy")
    by_library = {}
    for name in ("numpy", "torch", "jax"):
        if name not in frameworks or (name == "numpy" and config.device != "cpu"):
            continue
        call = _gemm_call(name, a, b, config.device)
        timing, _ = measure(
            call,
            repeats=max(3, config.repeats),
            warmup=max(1, config.warmup),
            min_sample_s=config.min_sample_s,
        )
        by_library[name] = {
            "gflops": gemm_flops(n) / timing.median_s / 1e9,
            "median_s": timing.median_s,
            "iqr_s": timing.iqr_s,
        }
    best = max(by_library, key=lambda k: by_library[k]["gflops"], default=None)
    return {
        "n": n,
        "dtype": "float32",
        "library": best,
        "gflops": None if best is None else by_library[best]["gflops"],
        "by_library": by_library,
    }


def _gemm_call(name: str, a: np.ndarray, b: np.ndarray, device: str):
    """A synchronizing a @ b in one framework."""
    if name == "numpy":
        return lambda: a @ b
    if name == "torch":
        import torch

        a_t, b_t = (torch.from_numpy(m).to(device) for m in (a, b))
        if device == "cuda":

            def call():
                product = a_t @ b_t
                torch.cuda.synchronize()
                return product

            return call
        return lambda: a_t @ b_t
    import jax

    a_j, b_j = (jax.device_put(m, jax_device(device)) for m in (a, b))
    matmul = jax.jit(lambda a, b: a @ b)
    return lambda: jax.block_until_ready(matmul(a_j, b_j))
