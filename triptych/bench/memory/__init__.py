"""`triptych bench --memory`: peak memory of naive and blockwise attention against T.

    triptych bench --memory [--T 512,1024,...,32768]
                   [--modes numpy,numpy-blockwise,...] [--d-model 512]
                   [--n-heads 8] [--batch 1] [--dtype float32] [--threads N]
                   [--memory-limit-gib GIB] [--memory-timeout 1800]
                   [--output-dir outputs/bench] [--quick] [--quiet]

Every (mode, T) point runs in a fresh Python process (`python -P -m
triptych.bench.memory SPEC`, with the folder that holds this package first on
PYTHONPATH, so the child runs this very code, never a `triptych/` that happens
to be in the working directory), so no allocator cache, compiled program or
thread pool left by an earlier point can hide or inflate a later one. In that
process (`triptych.bench.memory.probe`):

1. import the framework, make the shared fixture at this T in the dtype, and
   build the mode's runner (`triptych.bench.modes`): the inputs are already in
   the framework;
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
`triptych.bench.modes.base.Mode`) is skipped where one (B, H, T, T) array of the dtype
alone would take more than a quarter of --memory-limit-gib: at d_model 512, 8
heads, float32, batch 1 and 24 GiB, naive attention runs up to T = 8192 and the
blockwise modes up to 32768, where the naive weights alone would take 32 GiB.

Files, in --output-dir: memory.json, memory.csv, memory.md and
memory_vs_T.png (`triptych.bench.memory.report`), staged like every command's
(`triptych.common.files`: a hidden folder in --output-dir while the sweep
runs, then each file moved into place). Exit codes: 0 every point ran or was
skipped, 1 a point failed or gave non-finite output, 2 bad arguments or an
output directory that cannot be written (checked before the sweep).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import math
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from shared.dtypes import np_dtype
from triptych.bench.config import MemoryConfig, resolve_sweep
from triptych.bench.machine import cpu_model
from triptych.bench.memory.probe import CHILD_MARK
from triptych.bench.memory.report import ROW_FIELDS, SCHEMA
from triptych.bench.modes import MODES
from triptych.common.backends import versions
from triptych.common.errors import CommandError
from triptych.common.interrupt import killed_unless_done

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
CHILD_MODULE = "triptych.bench.memory"  # its __main__ runs one point
MEMORY_TIMEOUT_S = 1800
"""--memory-timeout when not given."""


def machine_memory_gib() -> float:
    """This machine's physical memory in GiB: --memory-limit-gib when not
    given (a container's own limit is not read; give it with the option)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def resolve_config(args: argparse.Namespace) -> MemoryConfig:
    """The memory sweep `args` ask for, with the memory defaults for what they
    leave.

    Raises:
        CommandError: an argument that does not fit, with a one-line message
            (`triptych.bench.config.resolve_sweep`'s, or --device cuda, or a
            limit that is not positive).
    """
    sweep = resolve_sweep(
        args, T=QUICK_T if args.quick else MEMORY_T, modes=DEFAULT_MODES
    )
    if args.device == "cuda":
        raise CommandError("--memory measures CPU memory; leave out --device cuda")
    limit = (
        machine_memory_gib() if args.memory_limit_gib is None else args.memory_limit_gib
    )
    timeout = MEMORY_TIMEOUT_S if args.memory_timeout is None else args.memory_timeout
    if not limit > 0 or timeout < 1:
        raise CommandError("--memory-limit-gib and --memory-timeout must be positive")
    return MemoryConfig(**sweep, memory_limit_gib=limit, timeout_s=timeout)


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


def weights_gib(config: MemoryConfig, T: int) -> float:
    """GiB of one (B, H, T, T) array of the dtype."""
    itemsize = np_dtype(config.dtype).itemsize
    return config.batch * config.n_heads * T * T * itemsize / 2**30


def run(config: MemoryConfig, results: list[dict[str, Any]]) -> dict[str, Any]:
    """Every (mode, T) point in a fresh process; the report.

    Args:
        results: where the rows go, one as each point ends (so that a sweep
            cut short by Ctrl-C leaves those done); the report holds them too.
    """
    for T in config.T:
        for name in config.modes:
            mode = MODES[name]
            row: dict[str, Any] = dict.fromkeys(ROW_FIELDS)
            row.update(
                mode=name,
                framework=mode.framework,
                kind=mode.kind,
                linear_memory=mode.linear_memory,
                T=T,
                weights_gib=weights_gib(config, T),
            )
            unavailable = mode.unavailable("cpu")  # --memory measures the CPU
            if unavailable:
                row.update(status="skipped", reason=unavailable)
            elif not row["linear_memory"] and row["weights_gib"] > (
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
            "cpu": cpu_model(),
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
    """One point in a child process: its measured fields and status.

    The child starts a session of its own, so a Ctrl-C at the terminal reaches
    this process alone; whichever way this function is left early (the
    timeout, Ctrl-C), the child's whole process group is killed and reaped
    first, so nothing it started outlives its point.
    """
    spec = dict(
        mode=mode,
        T=T,
        d_model=config.d_model,
        n_heads=config.n_heads,
        batch=config.batch,
        dtype=config.dtype,
        threads=config.threads,
    )
    # -P: no working directory on sys.path; the folder that holds triptych/
    # first instead (this file is triptych/bench/memory/__init__.py)
    package_root = str(Path(__file__).resolve().parents[3])
    path = [package_root, *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    command = [sys.executable, "-P", "-m", CHILD_MODULE, json.dumps(spec)]

    def start() -> subprocess.Popen:
        return subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
        )

    with killed_unless_done(start, _kill) as child:  # Ctrl-C above all
        try:
            stdout, stderr = child.communicate(timeout=config.timeout_s)
        except subprocess.TimeoutExpired:
            _kill(child)
            return dict(status="error", reason=f"took over {config.timeout_s} s")
    for line in reversed(stdout.splitlines()):
        if line.startswith(CHILD_MARK):
            return json.loads(line.removeprefix(CHILD_MARK))
    last = (stderr.strip().splitlines() or ["no output"])[-1]
    killed = " (killed: out of memory?)" if child.returncode in (-9, 137) else ""
    return dict(status="error", reason=f"exit code {child.returncode}{killed}: {last}")


def _kill(child: subprocess.Popen) -> None:
    """Kill the child's process group (the child and all it started); reap it."""
    with contextlib.suppress(ProcessLookupError):  # it has ended on its own
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


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
