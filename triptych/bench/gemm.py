"""The machine's matrix-multiply peak, measured in the same run as the modes:
float32 (n, n) @ (n, n) in every framework the run uses, timed by the same
clock; the best is the peak that `% of peak` divides by."""

from __future__ import annotations

import contextlib
import re
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
    speed on the table (docs/bench.md, "The GEMM gap").

    NumPy: the BLAS threadpoolctl finds (OpenBLAS reports the CPU type whose
    kernels it runs). torch: MKL (its version from torch.__config__.show());
    MKL picks its AVX-512 kernels on Intel CPUs only, its AVX2 ones elsewhere.
    JAX: XLA's CPU backend; the custom fusion kind of a compiled matmul names
    the library (YNNPACK, oneDNN) or none (XLA's own, Eigen).
    """
    cpu = cpu_features()
    amd_avx512 = cpu.get("avx512f") and cpu.get("vendor") == "AuthenticAMD"
    found: dict[str, dict] = {}
    pools = threads.get("threadpools", [])
    blas = next((p for p in pools if p.get("api") == "blas"), None)
    if "numpy" in frameworks and blas is not None:
        kernels = blas.get("architecture")
        note = None
        if cpu.get("avx512f") and kernels in ("Haswell", "Zen", "Sandybridge"):
            note = (
                f"OpenBLAS runs its {kernels} (AVX2) kernels on a CPU with "
                "AVX-512: start with OPENBLAS_CORETYPE=SkylakeX to use them"
            )
        found["numpy"] = {
            "library": blas.get("library"),
            "version": None,
            "kernels": kernels,
            "threads": blas.get("num_threads"),
            "note": note,
        }
        with contextlib.suppress(Exception):
            from threadpoolctl import threadpool_info

            for info in threadpool_info():
                if info.get("user_api") == "blas":
                    found["numpy"]["version"] = info.get("version")
                    break
    if "torch" in frameworks:
        import torch

        config = torch.__config__.show()
        mkl = re.search(r"Math Kernel Library Version ([\w.\-]+)", config)
        vendor = cpu.get("vendor", "unknown")
        found["torch"] = {
            "library": "MKL" if torch.backends.mkl.is_available() else "ATen BLAS",
            "version": mkl.group(1) if mkl else None,
            "kernels": "AVX2 (MKL chooses AVX-512 on Intel CPUs only)"
            if vendor != "GenuineIntel" and torch.backends.mkl.is_available()
            else torch.backends.cpu.get_cpu_capability(),
            "threads": torch.get_num_threads(),
            "note": "MKL runs AVX2 kernels on this AMD CPU with AVX-512, and "
            "offers no setting to change that (MKL_DEBUG_CPU_TYPE went in "
            "2020): half the peak of AVX-512 kernels where the cores run "
            "512-bit FMAs at full width (Zen 5), about the same where they "
            "split them in two (Zen 4)"
            if amd_avx512 and torch.backends.mkl.is_available()
            else None,
        }
    if "jax" in frameworks:
        import jax
        import jax.numpy as jnp

        a = jnp.ones((64, 64), jnp.float32)
        text = jax.jit(lambda a, b: a @ b).lower(a, a).compile().as_text()
        kinds = re.findall(r'"kind":"__(\w+?)_fusion"', text)
        library = {"ynn": "YNNPACK", "xnn": "XNNPACK", "onednn": "oneDNN"}
        found["jax"] = {
            "library": "XLA:CPU, dot through "
            + (library.get(kinds[0], kinds[0]) if kinds else "XLA's own (Eigen)"),
            "version": jax.__version__,
            "kernels": "chosen by CPU features"
            + (" (AVX-512 here)" if cpu.get("avx512f") else ""),
            "threads": threads.get("xla"),
            "note": None,
        }
    return found
