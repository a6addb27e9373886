"""The machine's matrix-multiply peak, measured in the same run as the modes:
float32 (n, n) @ (n, n) in every framework the run uses, timed by the same
clock; the best is the peak that `% of peak` divides by."""

from __future__ import annotations

from typing import Any

import numpy as np

from shared import registry
from triptych.bench.config import TimeConfig
from triptych.bench.modes import MODES
from triptych.bench.problem import SEED
from triptych.bench.timing import gemm_flops, measure
from triptych.common import backends


def gemm_peak(config: TimeConfig, skipped: dict[str, str]) -> dict[str, Any]:
    """float32 (n, n) @ (n, n) GFLOP/s of each framework here; the best is the peak.

    A framework counts on the run's device where it computes there (NumPy
    only on a CPU run, as the baseline), in the registry's order.
    """
    n = config.gemm_size
    rng = np.random.default_rng(SEED)
    a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    frameworks = {MODES[m].framework for m in config.modes if m not in skipped}
    if config.device == "cpu":
        frameworks.add(registry.reference().name)
    by_library = {}
    for framework in registry.frameworks():
        name = framework.name
        if name not in frameworks or config.device not in framework.devices:
            continue
        call = backends.hooks(name).gemm(a, b, config.device)
        timing, _ = measure(
            call,
            repeats=max(3, config.repeats),
            warmup=max(1, config.warmup),
            min_sample_s=config.min_sample_s,
            framework=name,
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


def cpu_features() -> dict[str, Any]:
    """The CPU's vendor and the vector instruction sets a GEMM kernel can use
    (from /proc/cpuinfo; empty where there is none)."""
    found: dict[str, Any] = {}
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "vendor_id" and "vendor" not in found:
                    found["vendor"] = value.strip()
                elif key == "flags" and "avx512f" not in found:
                    flags = set(value.split())
                    found.update({f: f in flags for f in ("avx2", "fma", "avx512f")})
    except OSError:
        pass
    return found


def gemm_libraries(frameworks, threads: dict[str, Any]) -> dict[str, dict]:
    """What runs each framework's float32 GEMM here: the library, its version,
    the kernels it chose, its threads, and a note where the choice leaves
    speed on the table (docs/bench.md, "The GEMM gap"): each backend's
    `gemm_library` hook (impl_<name>/backend.py), given the CPU's features and
    the threads set (NumPy's BLAS is among threadpoolctl's pools), for the
    `frameworks` of the run, in the registry's order.
    """
    cpu = cpu_features()
    found: dict[str, dict] = {}
    for name in registry.names():
        if name in frameworks:
            library = backends.hooks(name).gemm_library(cpu, threads)
            if library is not None:
                found[name] = library
    return found
