"""`triptych bench --memory`: peak memory of naive and blockwise attention against T.

    triptych bench --memory [--T 512,1024,...,32768] [--modes numpy,numpy-blockwise,...]
                   [--d-model 512] [--n-heads 8] [--batch 1] [--dtype float32]
                   [--threads N] [--memory-limit-gib 24] [--memory-timeout 1800]
                   [--output-dir outputs/bench] [--quick] [--quiet]

Every (mode, T) point runs in a fresh Python process (`python -P -m
triptych.memory SPEC`, with the folder that holds this package first on
PYTHONPATH, so the child runs this very code, never a `triptych/` that happens
to be in the working directory), so no allocator cache, compiled program or
thread pool left by an earlier point can hide or inflate a later one. In that
process:

1. import the framework, make the shared fixture at this T in the dtype, and
   build the mode's runner (`triptych.modes`): the inputs are already in the
   framework;
2. reset the kernel's peak-RSS mark (write "5" to /proc/self/clear_refs), make
   the first call (for a compiled mode, the trace and the compile), read the
   peak (VmHWM): `first_call_extra_mib` is that peak minus the resident memory
   before the call;
3. drop the outputs, collect, and give freed heap pages back to the OS
   (glibc's malloc_trim), so the next call cannot reuse pages already counted;
4. reset the mark again, read the resident memory (VmRSS): the baseline
   (interpreter, framework, inputs, compiled program); make one more call;
   `extra_mib` = its peak minus the baseline: the memory attention adds.

Why resident memory and not tracemalloc: tracemalloc sees NumPy's allocations
but not torch's or XLA's, which have allocators of their own; the resident set
counts all three the same way, including what BLAS and XLA take for
themselves. Its grain is a 4 KiB page, far below the MiBs measured. The
baseline is read in the same process just before the call, rather than from an
idle process, so the framework's own start-up memory is never in the figure.
Linux only (/proc).

A mode whose memory grows as T^2 (`linear_memory=False` in its
`triptych.modes.Mode`) is skipped where one (B, H, T, T) array of the dtype
alone would take more than a quarter of --memory-limit-gib: at d_model 512, 8
heads, float32, batch 1 and 24 GiB, naive attention runs up to T = 8192 and the
blockwise modes up to 32768, where the naive weights alone would take 32 GiB.

Files, in --output-dir: memory.json (everything), memory.csv (one row per
point), memory.md (the tables below) and memory_vs_T.png (log-log: the naive
modes rise as T^2, the blockwise ones as T), staged like every command's
(`triptych.common.files`: a hidden folder in --output-dir while the sweep runs, then
each file moved into place). Exit codes: 0 every point ran or was skipped, 1 a
point failed or gave non-finite output, 2 bad arguments or an output directory
that cannot be written (checked before the sweep).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import ctypes
import dataclasses
import datetime
import gc
import json
import math
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from triptych.common.files import StagedDirectory

SCHEMA = "triptych-memory/1"
MEMORY_T = (512, 1024, 2048, 4096, 8192, 16384, 32768)
QUICK_T = (64, 128)
DEFAULT_MODES = (
    "numpy",
    "numpy-blockwise",
    "torch-eager",
    "torch-blockwise",
    "torch-sdpa",
    "jax-jit",
    "jax-blockwise-jit",
    "jax-dpa",
)
# (blockwise, naive) of one framework: the ratio of their extra memory
PAIRS = (
    ("numpy-blockwise", "numpy"),
    ("torch-blockwise", "torch-eager"),
    ("jax-blockwise-jit", "jax-jit"),
)
FILES = ("memory.json", "memory.csv", "memory.md", "memory_vs_T.png")
ROW_FIELDS = (
    "mode",
    "framework",
    "kind",
    "linear_memory",
    "T",
    "status",
    "reason",
    "weights_gib",
    "baseline_mib",
    "extra_mib",
    "first_call_extra_mib",
    "peak_rss_gib",
    "call_s",
)
CHILD_MARK = "triptych-memory-result "
MIB = 2**20


# Command line (the flags join `triptych bench`'s) -----------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add --memory and its options to the `triptych bench` parser."""
    group = parser.add_argument_group("memory (triptych bench --memory)")
    group.add_argument(
        "--memory",
        action="store_true",
        help="measure the peak extra memory of each mode against T instead of "
        "its time, each point in a fresh process; writes memory.json, "
        "memory.csv, memory.md and memory_vs_T.png (default T: "
        f"{','.join(map(str, MEMORY_T))}; modes: {','.join(DEFAULT_MODES)})",
    )
    group.add_argument(
        "--memory-limit-gib",
        type=float,
        default=24.0,
        metavar="GIB",
        help="the machine's memory: a T^2 mode is skipped where one (B, H, T, T) "
        "array alone would take more than a quarter of it (default 24)",
    )
    group.add_argument(
        "--memory-timeout",
        type=int,
        default=1800,
        metavar="S",
        help="seconds one point may take (default 1800)",
    )


@dataclasses.dataclass(frozen=True)
class MemoryConfig:
    """One memory sweep."""

    T: tuple[int, ...]
    d_model: int
    n_heads: int
    batch: int
    dtype: str
    modes: tuple[str, ...]
    threads: int
    memory_limit_gib: float
    timeout_s: int
    output_dir: str
    quick: bool
    quiet: bool


def resolve_config(args: argparse.Namespace) -> MemoryConfig:
    """The sweep `args` ask for, with the memory defaults for what they leave.

    Raises:
        BenchArgumentError: an argument that does not fit, with a one-line
            message (`triptych.bench.resolve_common`'s, or --device cuda, or a
            limit that is not positive).
    """
    from triptych.bench import BenchArgumentError, resolve_common

    common = resolve_common(args)
    if args.device == "cuda":
        raise BenchArgumentError(
            "--memory measures CPU memory; leave out --device cuda"
        )
    if not args.memory_limit_gib > 0 or args.memory_timeout < 1:
        raise BenchArgumentError(
            "--memory-limit-gib and --memory-timeout must be positive"
        )
    return MemoryConfig(
        **common,
        T=args.T or (QUICK_T if args.quick else MEMORY_T),
        modes=args.modes or DEFAULT_MODES,
        memory_limit_gib=args.memory_limit_gib,
        timeout_s=args.memory_timeout,
        output_dir=args.output_dir,
        quick=bool(args.quick),
        quiet=bool(args.quiet),
    )


def main(args: argparse.Namespace) -> int:
    """`triptych bench --memory`: run the sweep, write the files; the exit code."""
    config = resolve_config(args)
    with StagedDirectory(config.output_dir, "memory") as staging:
        report = run(config)
        paths = staging.commit(write_outputs(report, staging.path), FILES)
    print(markdown(report))
    print("wrote " + ", ".join(str(p) for p in paths))
    bad = [r for r in report["results"] if r["status"] in ("error", "wrong")]
    for row in bad:
        print(
            f"triptych bench --memory: {row['mode']} at T={row['T']} "
            f"{row['status']}: {row['reason']}",
            file=sys.stderr,
        )
    return 1 if bad else 0


def command_line(config: MemoryConfig) -> str:
    """The command that repeats this sweep."""
    parts = [
        "triptych", "bench", "--memory",
        "--T", ",".join(map(str, config.T)),
        "--d-model", str(config.d_model),
        "--n-heads", str(config.n_heads),
        "--batch", str(config.batch),
        "--dtype", config.dtype,
        "--modes", ",".join(config.modes),
        "--threads", str(config.threads),
        "--memory-limit-gib", f"{config.memory_limit_gib:g}",
    ]  # fmt: skip
    return shlex.join(parts)


# The sweep (parent process) ---------------------------------------------------


def weights_gib(config: MemoryConfig, T: int) -> float:
    """GiB of one (B, H, T, T) array of the dtype."""
    from shared.dtypes import np_dtype

    itemsize = np_dtype(config.dtype).itemsize
    return config.batch * config.n_heads * T * T * itemsize / 2**30


def run(config: MemoryConfig) -> dict[str, Any]:
    """Every (mode, T) point in a fresh process; the report."""
    from triptych import bench, modes
    from triptych.common.backends import versions

    results = []
    for T in config.T:
        for name in config.modes:
            mode = modes.MODES[name]
            row: dict[str, Any] = dict.fromkeys(ROW_FIELDS)
            row.update(
                mode=name,
                framework=mode.framework,
                kind=mode.kind,
                linear_memory=mode.linear_memory,
                T=T,
                weights_gib=weights_gib(config, T),
            )
            if not row["linear_memory"] and row["weights_gib"] > (
                config.memory_limit_gib / 4
            ):
                row.update(
                    status="skipped",
                    reason=f"one (B, H, T, T) array alone is "
                    f"{row['weights_gib']:.3g} GiB, over a quarter of "
                    f"--memory-limit-gib {config.memory_limit_gib:g}",
                )
            else:
                if not config.quiet:
                    print(f"T={T} {name} ...", file=sys.stderr, flush=True)
                row.update(run_point(config, name, T))
            results.append(row)
    return {
        "schema": SCHEMA,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": command_line(config),
        "header": {
            "cpu": bench.cpu_model(),
            "logical_cores": os.cpu_count(),
            "threads": config.threads,
            "versions": versions(),
        },
        "config": dataclasses.asdict(config) | {"T": list(config.T)},
        "method": (
            "each point in a fresh process; extra_mib = peak resident set "
            "(VmHWM, reset through /proc/self/clear_refs) during one call, "
            "after a first call and malloc_trim, minus the resident set just "
            "before it; first_call_extra_mib the same for the first call "
            "(compile included)"
        ),
        "results": results,
        "ratios": ratios(results),
        "slopes": slopes(results),
    }


def run_point(config: MemoryConfig, mode: str, T: int) -> dict[str, Any]:
    """One point in a child process: its measured fields and status."""
    spec = dict(
        mode=mode,
        T=T,
        d_model=config.d_model,
        n_heads=config.n_heads,
        batch=config.batch,
        dtype=config.dtype,
        threads=config.threads,
    )
    # -P: no working directory on sys.path; this package's folder first instead
    package_root = str(Path(__file__).resolve().parent.parent)
    path = [package_root, *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    command = [sys.executable, "-P", "-m", "triptych.memory", json.dumps(spec)]
    try:
        child = subprocess.run(
            command, capture_output=True, text=True, timeout=config.timeout_s, env=env
        )
    except subprocess.TimeoutExpired:
        return dict(status="error", reason=f"took over {config.timeout_s} s")
    for line in reversed(child.stdout.splitlines()):
        if line.startswith(CHILD_MARK):
            return json.loads(line.removeprefix(CHILD_MARK))
    last = (child.stderr.strip().splitlines() or ["no output"])[-1]
    killed = " (killed: out of memory?)" if child.returncode in (-9, 137) else ""
    return dict(status="error", reason=f"exit code {child.returncode}{killed}: {last}")


def ratios(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each (blockwise, naive) pair and T where both ran: extra memory ratio."""
    ok = {(r["mode"], r["T"]): r for r in results if r["status"] == "ok"}
    found = []
    for blockwise, naive in PAIRS:
        for T in sorted({t for _, t in ok}):
            a, b = ok.get((blockwise, T)), ok.get((naive, T))
            if a and b and b["extra_mib"] > 0:
                found.append(
                    dict(
                        blockwise=blockwise,
                        naive=naive,
                        T=T,
                        ratio=a["extra_mib"] / b["extra_mib"],
                    )
                )
    return found


def slopes(results: list[dict[str, Any]], last: int = 3) -> dict[str, float]:
    """Each mode's log-log slope of extra memory over its `last` largest T."""
    found = {}
    for mode in dict.fromkeys(r["mode"] for r in results):
        points = sorted(
            (r["T"], r["extra_mib"])
            for r in results
            if r["mode"] == mode and r["status"] == "ok" and r["extra_mib"] > 0
        )[-last:]
        if len(points) < 2:
            continue
        xs = [math.log(t) for t, _ in points]
        ys = [math.log(m) for _, m in points]
        x_mean, y_mean = sum(xs) / len(xs), sum(ys) / len(ys)
        spread = sum((x - x_mean) ** 2 for x in xs)
        found[mode] = (
            sum((x - x_mean) * (y - y_mean) for x, y in zip(xs, ys, strict=True))
            / spread
        )
    return found


# One point (child process) ----------------------------------------------------


def _status_kib(field: str) -> int:
    """A field of /proc/self/status in KiB, e.g. VmRSS or VmHWM."""
    with open("/proc/self/status") as status:
        match = re.search(rf"^{field}:\s+(\d+) kB", status.read(), re.M)
    if match is None:
        raise RuntimeError(f"/proc/self/status has no {field}")
    return int(match.group(1))


def _reset_peak() -> None:
    """Set the peak-RSS mark (VmHWM) to the current resident set (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def _release_free_memory() -> None:
    """Collect, and give glibc's free heap pages back to the OS where we can."""
    gc.collect()
    # not glibc (no libc.so.6 or no malloc_trim): freed pages may stay resident
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def measure_point(spec: dict[str, Any]) -> dict[str, Any]:
    """Steps 1 to 4 of the module docstring, for one mode at one T."""
    import numpy as np

    from triptych import bench, modes
    from triptych.common.backends import load_backend

    mode = modes.MODES[spec["mode"]]
    with bench.thread_limits(spec["threads"]):
        load_backend(mode.framework)
        problem = bench.make_problem(
            spec["T"],
            d_model=spec["d_model"],
            n_heads=spec["n_heads"],
            batch=spec["batch"],
            dtype=spec["dtype"],
            device="cpu",
        )
        runner = mode.build(problem)
        del problem
        _release_free_memory()
        # 2. the first call (compile included)
        _reset_peak()
        before_first = _status_kib("VmRSS")
        result = (runner.first_call or runner.call)()
        first_peak = _status_kib("VmHWM")
        # 3. give back what it freed
        del result
        _release_free_memory()
        # 4. one more call against the resident set just before it
        _reset_peak()
        baseline = _status_kib("VmRSS")
        start = time.perf_counter()
        result = runner.call()
        call_s = time.perf_counter() - start
        peak = _status_kib("VmHWM")
        out, _ = runner.to_numpy(result)
        finite = bool(np.isfinite(out).all())
    return dict(
        status="ok" if finite else "wrong",
        reason=None if finite else "the output has NaN or inf",
        baseline_mib=baseline / 1024,
        extra_mib=(peak - baseline) / 1024,
        first_call_extra_mib=(first_peak - before_first) / 1024,
        peak_rss_gib=max(peak, first_peak) / 2**20,
        call_s=call_s,
    )


def child_main(argv: list[str]) -> int:
    """`python -m triptych.memory SPEC`: measure one point, print it as JSON."""
    spec = json.loads(argv[0])
    try:
        fields = measure_point(spec)
    except Exception as error:  # reported as the point's error, not a crash
        message = (str(error).strip().splitlines() or [""])[0]
        fields = dict(status="error", reason=f"{type(error).__name__}: {message}")
    print(CHILD_MARK + json.dumps(fields), flush=True)
    return 0


# Files ------------------------------------------------------------------------


def markdown(report: dict[str, Any]) -> str:
    """memory.md: the extra memory table, the ratios and the slopes."""
    config, results = report["config"], report["results"]
    modes = config["modes"]
    lines = [
        "# triptych bench --memory",
        "",
        f"`{report['command']}`  ",
        f"{report['created']}, {report['header']['cpu']}, "
        f"{report['header']['threads']} threads, d_model {config['d_model']}, "
        f"{config['n_heads']} heads, batch {config['batch']}, {config['dtype']}",
        "",
        "Peak extra memory of one call, MiB (resident set above the baseline "
        "just before the call; each point in a fresh process):",
        "",
        "| T | " + " | ".join(modes) + " |",
        "|---:|" + "---:|" * len(modes),
    ]
    cells = {(r["mode"], r["T"]): r for r in results}
    for T in config["T"]:
        row = []
        for mode in modes:
            r = cells[(mode, T)]
            row.append(
                f"{r['extra_mib']:.1f}"
                if r["status"] == "ok"
                else ("-" if r["status"] == "skipped" else r["status"])
            )
        lines.append(f"| {T} | " + " | ".join(row) + " |")
    if report["ratios"]:
        lines += ["", "Blockwise over naive, extra memory:", ""]
        lines += ["| T | pair | ratio |", "|---:|---|---:|"]
        lines += [
            f"| {r['T']} | {r['blockwise']} / {r['naive']} | {r['ratio']:.4f} |"
            for r in report["ratios"]
        ]
    if report["slopes"]:
        lines += ["", "Log-log slope of extra memory against T (largest 3 T):", ""]
        lines += [f"- {m}: {s:.2f}" for m, s in report["slopes"].items()]
    biggest = [r for r in results if r["status"] == "ok"]
    if biggest:
        T_max = max(r["T"] for r in biggest)
        lines += ["", f"At T = {T_max}:", ""]
        lines += [
            f"- {r['mode']}: peak resident set {r['peak_rss_gib']:.2f} GiB, "
            f"one call {r['call_s']:.1f} s"
            for r in biggest
            if r["T"] == T_max
        ]
    skipped = [r for r in results if r["status"] == "skipped"]
    if skipped:
        lines += ["", "Skipped (T^2 modes):", ""]
        lines += [f"- {r['mode']} at T={r['T']}: {r['reason']}" for r in skipped]
    return "\n".join(lines) + "\n"


def write_outputs(report: dict[str, Any], directory: Path) -> list[str]:
    """Write the four files into `directory` (the staging folder); their names."""
    (directory / FILES[0]).write_text(json.dumps(report, indent=2) + "\n")
    with (directory / FILES[1]).open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=ROW_FIELDS)
        writer.writeheader()
        writer.writerows(report["results"])
    (directory / FILES[2]).write_text(markdown(report))
    plot(report, directory / FILES[3])
    return list(FILES)


def plot(report: dict[str, Any], path: Path) -> None:
    """memory_vs_T.png: extra MiB against T, log-log, with T and T^2 guides."""
    from matplotlib.figure import Figure

    from triptych.common.plots import finish_line_plot, mode_color

    fig = Figure(figsize=(9, 5))
    ax = fig.subplots()
    results = report["results"]
    for index, mode in enumerate(report["config"]["modes"]):
        points = sorted(
            (r["T"], r["extra_mib"])
            for r in results
            if r["mode"] == mode and r["status"] == "ok" and r["extra_mib"] > 0
        )
        if not points:
            continue
        kind = next(r["kind"] for r in results if r["mode"] == mode)
        ax.plot(
            [t for t, _ in points],
            [m for _, m in points],
            marker="o",
            linestyle="--" if kind == "reference" else "-",
            color=mode_color(index),
            label=mode + (" (reference)" if kind == "reference" else ""),
        )
    ok = [r for r in results if r["status"] == "ok" and r["extra_mib"] > 0]
    T_lo = min((r["T"] for r in ok), default=None)
    for power, linear, style, label in (
        (2, False, "-.", "∝ T²"),
        (1, True, ":", "∝ T"),
    ):
        # a guide through the group's point at its largest T, back to the first T
        group = [r for r in ok if r["linear_memory"] == linear]
        if not group:
            continue
        anchor = max(group, key=lambda r: (r["T"], r["extra_mib"]))
        ts = [T_lo, anchor["T"]]
        ax.plot(
            ts,
            [anchor["extra_mib"] * (t / anchor["T"]) ** power for t in ts],
            color="grey",
            linewidth=0.8,
            linestyle=style,
            label=label,
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("T (sequence length)")
    ax.set_ylabel("peak extra memory of one call (MiB)")
    config = report["config"]
    ax.set_title(
        f"naive vs blockwise attention: d_model {config['d_model']}, "
        f"{config['n_heads']} heads, batch {config['batch']}, {config['dtype']}",
        fontsize=10,
    )
    finish_line_plot(fig, ax, path)


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
