"""The roofline of `triptych bench`: the machine's memory bandwidth, measured
in the same run as the GEMM peak, each mode's compulsory memory traffic, and
the figure (roofline.png) that puts each mode and T under both ceilings.

Bandwidth: a STREAM-like copy of a float32 array far larger than the caches
(256 MiB, or BEYOND_LLC times the last-level cache the machine reports where
that is more; --quick as large: a copy that fits the L3 measures the cache,
not memory), NumPy's `np.copyto` (one thread) and, where the run has torch,
`Tensor.copy_` (its threads); 2 x the array's bytes per copy (one read, one
write), the median of the samples, the best of the libraries (each backend's
`copy` hook: JAX, whose arrays are immutable, has none), with its spread
(the interquartile range): a noisy bandwidth makes a noisy bound.

Compulsory traffic: the bytes a mode's algorithm must move between memory and
the cores, s bytes per number (B batch, T length, C width, H heads):

    every mode     s * (4 C^2 + 10 B T C)     the four (C, C) weights; x read,
                                              q, k, v written and read, the
                                              merged heads written and read,
                                              out written
    naive, weights + s * 4 B H T^2            the (B, H, T, T) scores written
                                              and read, the weights written
                                              (returned) and read by weights @ v
    naive, none    + s * 2 B H T^2            scores written once and read once
                                              (jax-dpa: XLA's CPU path keeps
                                              the square, returns no weights)
    blocked (Bq)   + s * B C T (T / Bq + 1)   k and v read again by each of the
                                              T / Bq query blocks, on average
                                              up to half of T; the scores of
                                              one block stay in the caches

Arithmetic intensity is the useful FLOPs (triptych.bench.timing) over those
bytes; the roofline bound at that intensity is min(GEMM peak, intensity x
bandwidth). A mode far below its bound loses its time neither to arithmetic
nor to compulsory traffic: to extra passes over memory, small products, or
Python and dispatch, which the breakdown (triptych.bench.breakdown) says.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from shared import registry
from triptych.bench.timing import NOISY_IQR, measure
from triptych.common import backends

BEYOND_LLC = 4
"""The bandwidth copy's array is at least this many times the last-level
cache: well beyond it, read from memory whatever stays cached."""
LLC_FALLBACK_MIB = 32
"""The last-level cache assumed where the machine does not say (a large
server L3; more only makes the copy larger)."""
CACHES = Path("/sys/devices/system/cpu/cpu0/cache")


def last_level_cache_mib(caches: Path = CACHES) -> tuple[float, str]:
    """(MiB, where it was read): the largest data or unified cache of CPU 0
    (Linux's sysfs, e.g. index3/size "32768K"), else LLC_FALLBACK_MIB."""
    sizes = []
    for index in sorted(caches.glob("index*")):
        try:
            if (index / "type").read_text().strip() == "Instruction":
                continue
            text = (index / "size").read_text().strip().upper()
        except OSError:
            continue
        unit = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * unit / 2**20)
    if not sizes:
        return float(LLC_FALLBACK_MIB), "assumed: the machine does not say"
    return max(sizes), str(caches)


def bandwidth_array_mib(asked_mib: int, llc_mib: float) -> int:
    """The bandwidth copy's array, MiB: `asked_mib`, or BEYOND_LLC times the
    last-level cache where that is more."""
    return max(asked_mib, int(np.ceil(BEYOND_LLC * llc_mib)))


def memory_bandwidth(array_mib: int, frameworks, repeats: int) -> dict[str, Any]:
    """GB/s of a copy of a float32 array of at least `array_mib` MiB and well
    beyond the last-level cache (`bandwidth_array_mib`), per library, with
    its spread; the best is the run's bandwidth."""
    llc_mib, llc_from = last_level_cache_mib()
    array_mib = bandwidth_array_mib(array_mib, llc_mib)
    n = array_mib * 2**20 // 4
    source = np.full(n, 1.5, dtype=np.float32)  # its pages touched, at once
    target = np.zeros_like(source)
    plain = registry.reference().name  # NumPy copies on every run
    copies = {
        name: backends.hooks(name).copy(source, target)
        for name in registry.names()
        if name == plain or name in frameworks
    }
    by_library = {}
    for name, copy in copies.items():
        if copy is None:  # immutable arrays (JAX): no copy into one
            continue
        timing, _ = measure(
            copy, repeats=max(5, repeats), warmup=1, min_sample_s=0, framework=name
        )
        by_library[name] = {
            "gb_s": 2 * source.nbytes / timing.median_s / 1e9,
            "median_s": timing.median_s,
            "iqr_s": timing.iqr_s,
            "spread": timing.iqr_s / timing.median_s,  # of the median
        }
    best = max(by_library, key=lambda k: by_library[k]["gb_s"])
    return {
        "array_mib": array_mib,
        "llc_mib": llc_mib,
        "llc_from": llc_from,
        "method": "copy of a float32 array, 2 x its bytes per copy (read + write)",
        "library": best,
        "gb_s": by_library[best]["gb_s"],
        "spread": by_library[best]["spread"],
        "noisy": by_library[best]["spread"] > NOISY_IQR,
        "by_library": by_library,
    }


def query_block(
    mode_name: str, T: int, n_heads: int, itemsize: int, threads: int | None = None
) -> int | None:
    """Bq, the query block of a blocked mode (None for the others); `threads`:
    the run's, which JAX's tuned block depends on (None: the cores now)."""
    if "blockwise" in mode_name:
        from impl_numpy.blockwise import DEFAULT_BLOCK_SIZE

        return min(DEFAULT_BLOCK_SIZE, T)
    if mode_name == "numpy-tuned":
        from impl_numpy.tuned import query_block_size

        return query_block_size(T)
    if mode_name == "torch-tuned":  # a row of it: torch ran
        from impl_torch.tuned import query_block_size

        return query_block_size(T)
    if mode_name == "jax-tuned-jit":
        from shared.blocks import head_groups  # impl_jax.tuned's rule

        return head_groups(T, n_heads, cores=threads)[1]
    if mode_name.startswith("torch-sdpa"):
        # PyTorch's CPU flash kernel: queries in blocks of 256 from T = 768
        return min(T, 256 if T >= 768 else 64 if T >= 192 else 32)
    return None


def traffic_bytes(mode, T: int, config: dict[str, Any]) -> float | None:
    """The compulsory bytes of one call of `mode` at T (module doc); None for
    the training modes, whose work is not attention's."""
    if mode.work != "attention":
        return None
    B, C, H = config["batch"], config["d_model"], config["n_heads"]
    s = np.dtype(config["dtype"]).itemsize if config["dtype"] != "bfloat16" else 2
    base = 4 * C * C + 10 * B * T * C
    threads = config.get("threads")
    block = query_block(mode.name, T, H, s, threads) if mode.linear_memory else None
    if block is not None:
        return s * (base + B * C * T * (T / block + 1))
    squares = 4 if mode.returns_weights else 2
    return s * (base + squares * B * H * T * T)


def add_roofline(
    results: list[dict[str, Any]], config: dict[str, Any], peak: dict, bandwidth: dict
) -> None:
    """Fill each ok row's traffic_bytes, intensity, roofline_gflops (the bound
    at its intensity) and pct_of_roofline."""
    from triptych.bench.modes import MODES

    for row in results:
        mode = MODES.get(row["mode"])
        if row["status"] != "ok" or mode is None:
            continue
        traffic = traffic_bytes(mode, row["T"], config)
        if traffic is None:
            continue
        row["traffic_bytes"] = traffic
        row["intensity"] = row["useful_gflop"] * 1e9 / traffic
        if peak.get("gflops") and bandwidth.get("gb_s"):
            bound = min(peak["gflops"], row["intensity"] * bandwidth["gb_s"])
            row["roofline_gflops"] = bound
            row["pct_of_roofline"] = 100 * row["gflops"] / bound


def plot_roofline(report: dict[str, Any], path: Path) -> bool:
    """roofline.png: useful GFLOP/s against arithmetic intensity, log-log, one
    line per mode through its T, under the GEMM peak and the bandwidth slope;
    False (nothing written) without a point or a ceiling."""
    rows = [r for r in report["results"] if r.get("intensity") is not None]
    peak = report["gemm_peak"].get("gflops")
    bandwidth = (report.get("bandwidth") or {}).get("gb_s")
    if not rows or not peak or not bandwidth:
        return False
    from matplotlib.figure import Figure

    from triptych.common.plots import finish_line_plot, mode_color

    config = report["config"]
    fig = Figure(figsize=(9, 5.5))
    ax = fig.subplots()
    intensities = [r["intensity"] for r in rows]
    low, high = min(intensities) / 2, max(intensities) * 2
    ridge = peak / bandwidth
    x = np.geomspace(min(low, ridge / 4), max(high, ridge * 4), 200)
    ax.plot(x, np.minimum(peak, x * bandwidth), color="black", linewidth=1.5)
    ax.annotate(
        f"GEMM peak {peak:.3g} GFLOP/s ({report['gemm_peak']['library']})",
        (x[-1], peak), ha="right", va="bottom", fontsize=8,
    )  # fmt: skip
    ax.annotate(
        f"memory {bandwidth:.3g} GB/s",
        (x[0], x[0] * bandwidth), ha="left", va="bottom", fontsize=8, rotation=20,
    )  # fmt: skip
    for index, mode in enumerate(report["modes"]):
        points = sorted((r for r in rows if r["mode"] == mode["name"]), key=_by_T)
        if not points:
            continue
        ax.plot(
            [r["intensity"] for r in points],
            [r["gflops"] for r in points],
            marker="o",
            markersize=4,
            linestyle="--" if mode["kind"] == "reference" else "-",
            color=mode_color(index),
            label=mode["name"],
        )
        last = points[-1]
        ax.annotate(
            f"T={last['T']}", (last["intensity"], last["gflops"]),
            fontsize=6, xytext=(3, -3), textcoords="offset points",
        )  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity, useful FLOPs per byte of compulsory traffic")
    ax.set_ylabel("useful GFLOP/s (median)")
    ax.set_title(
        f"roofline, {config['dtype']} on {config['device']}: B={config['batch']}, "
        f"C={config['d_model']}, H={config['n_heads']}, threads={config['threads']}; "
        "each line runs through its T",
        fontsize=9,
    )
    finish_line_plot(fig, ax, path)
    return True


def _by_T(row: dict[str, Any]) -> int:
    return row["T"]
