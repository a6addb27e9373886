"""`triptych bench`: jit against eager, every framework timed the same way.

    triptych bench [--T 128,256,512,1024,2048] [--d-model 512] [--n-heads 8]
                   [--batch 1] [--dtype float32] [--modes numpy,jax-jit,...]
                   [--repeats 10] [--warmup 2] [--threads N] [--device auto]
                   [--output-dir outputs/bench] [--quick] [--quiet]

For every mode of `triptych.modes` and every T, on the shared fixture: the first
call (trace and compile) on its own, the steady state (median and IQR, see
`triptych.timing`), useful GFLOP/s and their share of a float32 GEMM measured
in the same run, the speedup of jit over eager within each framework and of
every mode over NumPy. Before any of it, the mode's output must match NumPy's
at the dtype's tolerance (`shared.tolerances`); one that does not is reported
as wrong and not timed. The files it writes are described in
`triptych.bench_report`.

Threads: one count N for every framework, set before any of them runs.
torch.set_num_threads(N); NumPy's BLAS (and OpenMP) through threadpoolctl. XLA
has no setting for N threads: it sizes its pool from the cores the process may
use, so for N below those the process is pinned to N cores, and N = 1 also sets
XLA_FLAGS=--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1.
Both only work before JAX starts its backend; if it already has, the header
says so.

Exit codes: 0 every requested mode ran and agreed with NumPy (or was skipped
because its framework is missing or lacks the device); 1 a mode was wrong or
failed (the files are still written); 2 bad arguments or an output directory
that cannot be written (checked before the sweep).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import gc
import os
import platform
import shlex
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

from shared.config import Preset
from shared.dtypes import FLOAT_DTYPES, np_dtype
from shared.fixture import make_fixture
from shared.tolerances import is_close, max_abs_diff, tolerance
from triptych import memory
from triptych import modes as modes_registry
from triptych.common.backends import BackendMissingError, load_backend, versions
from triptych.common.errors import CommandError
from triptych.common.files import StagedDirectory
from triptych.timing import attention_flops, gemm_flops, measure

SCHEMA = "triptych-bench/1"

FULL = dict(
    T=(128, 256, 512, 1024, 2048),
    d_model=512,
    n_heads=8,
    batch=1,
    repeats=10,
    warmup=2,
    gemm_size=1024,
    min_sample_s=0.01,
)
QUICK = dict(
    T=(8, 16),
    d_model=32,
    n_heads=4,
    batch=1,
    repeats=3,
    warmup=1,
    gemm_size=128,
    min_sample_s=0.001,
)
SEED = 0


class BenchArgumentError(CommandError):
    """A bad argument found after parsing (exit code 2)."""


# Command line -----------------------------------------------------------------


def add_parser(subparsers) -> argparse.ArgumentParser:
    names = ", ".join(modes_registry.MODES)
    parser = subparsers.add_parser(
        "bench",
        help="time jit against eager, every framework the same way",
        description=(
            "Time causal self-attention in every mode on the shared fixture: "
            "first call (trace and compile) apart from the steady state, useful "
            "GFLOP/s against a float32 GEMM measured in the same run, speedups, "
            "after checking each mode's output against NumPy's."
        ),
    )
    parser.add_argument(
        "--T",
        type=_lengths,
        metavar="T1,T2,...",
        help=f"sequence lengths (default: {_csv(FULL['T'])}; --quick: "
        f"{_csv(QUICK['T'])})",
    )
    parser.add_argument(
        "--d-model",
        type=_positive,
        metavar="C",
        help=_default("model width", "d_model"),
    )
    parser.add_argument(
        "--n-heads", type=_positive, metavar="H", help=_default("heads", "n_heads")
    )
    parser.add_argument(
        "--batch", type=_positive, metavar="B", help=_default("batch size", "batch")
    )
    parser.add_argument(
        "--dtype",
        default="float32",
        choices=FLOAT_DTYPES,
        help="every mode's dtype",
    )
    parser.add_argument(
        "--modes",
        type=_mode_names,
        metavar="M1,M2,...",
        help=f"modes to run (default: all, {names})",
    )
    parser.add_argument(
        "--repeats",
        type=_positive,
        metavar="N",
        help=_default("steady-state samples", "repeats"),
    )
    parser.add_argument(
        "--warmup",
        type=_non_negative,
        metavar="N",
        help=_default("untimed calls after the first", "warmup"),
    )
    parser.add_argument(
        "--threads",
        type=_positive,
        metavar="N",
        help="threads for every framework (default: the cores this process may use)",
    )
    parser.add_argument(
        "--device",
        default="auto",
        choices=["cpu", "cuda", "auto"],
        help="auto: cuda where torch or JAX sees one, else cpu",
    )
    parser.add_argument(
        "--gemm-size",
        type=_positive,
        metavar="N",
        help=_default("n of the float32 (n, n) @ (n, n) peak measurement", "gemm_size"),
    )
    parser.add_argument(
        "--output-dir", default="outputs/bench", metavar="DIR", help="where files go"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes, a few repeats: a smoke run of seconds (plus compiles)",
    )
    parser.add_argument(
        "--quiet", action="store_true", help="no progress bar and no header"
    )
    memory.add_arguments(parser)  # --memory: triptych/memory.py
    parser.set_defaults(func=main)
    return parser


def _default(text: str, key: str) -> str:
    return f"{text} (default: {FULL[key]}; --quick: {QUICK[key]})"


def _csv(values) -> str:
    return ",".join(str(v) for v in values)


def _positive(text: str) -> int:
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative(text: str) -> int:
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def _lengths(text: str) -> tuple[int, ...]:
    lengths = []
    for part in text.split(","):
        T = _integer(part.strip())
        if T < 1:
            raise argparse.ArgumentTypeError(f"every T must be at least 1, got {T}")
        lengths.append(T)
    return tuple(dict.fromkeys(lengths))


def _mode_names(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in modes_registry.MODES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown mode {', '.join(map(repr, unknown)) or 'list'}; "
            f"choose from {', '.join(modes_registry.MODES)}"
        )
    return names


@dataclasses.dataclass(frozen=True)
class Config:
    """The resolved settings of one run."""

    T: tuple[int, ...]
    d_model: int
    n_heads: int
    batch: int
    dtype: str
    modes: tuple[str, ...]
    repeats: int
    warmup: int
    threads: int
    device: str
    gemm_size: int
    min_sample_s: float
    output_dir: str
    quick: bool
    quiet: bool


def resolve_common(args: argparse.Namespace) -> dict[str, Any]:
    """The settings `triptych bench` and `--memory` share, from `args` or the
    full or --quick defaults: d_model, n_heads, batch, dtype, threads.

    Raises:
        BenchArgumentError: n_heads does not divide d_model, or --threads asks
            for more cores than this process may use.
    """
    defaults = QUICK if args.quick else FULL
    d_model = args.d_model or defaults["d_model"]
    n_heads = args.n_heads or defaults["n_heads"]
    if d_model % n_heads:
        raise BenchArgumentError(
            f"--n-heads {n_heads} does not divide --d-model {d_model}"
        )
    cores = schedulable_cores()
    threads = args.threads or cores
    if threads > cores:
        raise BenchArgumentError(
            f"--threads {threads} asks for more than the {cores} cores this "
            "process may use"
        )
    return dict(
        d_model=d_model,
        n_heads=n_heads,
        batch=args.batch or defaults["batch"],
        dtype=args.dtype,
        threads=threads,
    )


def resolve_config(args: argparse.Namespace) -> Config:
    """Fill what was not given from the full or the --quick defaults.

    Raises:
        BenchArgumentError: see `resolve_common`.
    """
    defaults = QUICK if args.quick else FULL
    return Config(
        **resolve_common(args),
        T=args.T or defaults["T"],
        modes=args.modes or tuple(modes_registry.MODES),
        repeats=args.repeats or defaults["repeats"],
        warmup=defaults["warmup"] if args.warmup is None else args.warmup,
        device=args.device,
        gemm_size=args.gemm_size or defaults["gemm_size"],
        min_sample_s=defaults["min_sample_s"],
        output_dir=args.output_dir,
        quick=args.quick,
        quiet=args.quiet,
    )


def main(args: argparse.Namespace) -> int:
    """Run the sweep, print the table, write the files; the exit code."""
    if getattr(args, "memory", False):
        return memory.main(args)
    from triptych.bench_report import FILES, markdown, write_outputs

    config = resolve_config(args)
    with thread_limits(config.threads) as threads:
        device, unreachable = resolve_device(config.device)
        config = dataclasses.replace(config, device=device)
        with StagedDirectory(config.output_dir, "bench") as staging:
            report = run(config, threads, unreachable)
            written = write_outputs(report, staging.path)
            paths = staging.commit(written, FILES)
    print(markdown(report, full=False))
    print("wrote " + ", ".join(str(p) for p in paths))
    bad = [r for r in report["results"] if r["status"] in ("wrong", "error")]
    for row in bad:
        what = "is wrong" if row["status"] == "wrong" else "failed"
        print(
            f"triptych bench: {row['mode']} at T={row['T']} {what}: {row['reason']}",
            file=sys.stderr,
        )
    return 1 if bad else 0


def command_line(config: Config) -> str:
    """The command that repeats this run, every setting spelled out."""
    parts = [
        "triptych", "bench",
        "--T", _csv(config.T),
        "--d-model", str(config.d_model),
        "--n-heads", str(config.n_heads),
        "--batch", str(config.batch),
        "--dtype", config.dtype,
        "--modes", _csv(config.modes),
        "--repeats", str(config.repeats),
        "--warmup", str(config.warmup),
        "--threads", str(config.threads),
        "--device", config.device,
        "--gemm-size", str(config.gemm_size),
    ]  # fmt: skip
    return shlex.join(parts + (["--quick"] if config.quick else []))


# Threads and devices ----------------------------------------------------------


def schedulable_cores() -> int:
    """The cores this process may run on (its affinity), or all of them."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _jax_backend_started() -> bool:
    """True if JAX has already created its backends (too late for XLA_FLAGS)."""
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import xla_bridge  # no public way to ask

        return bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):
        return True  # cannot tell: assume the worst


THREAD_ENV = (
    "OPENBLAS_CORETYPE",
    "OPENBLAS_L2_SIZE",
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "XLA_FLAGS",
)
XLA_ONE_THREAD = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


@contextlib.contextmanager
def thread_limits(n: int) -> Iterator[dict[str, Any]]:
    """Set n threads for torch, NumPy's BLAS and XLA; yield what was set.

    Restores torch's count, the BLAS limits and the affinity on exit (XLA keeps
    the thread pool it made).
    """
    from threadpoolctl import threadpool_info, threadpool_limits

    cores = schedulable_cores()
    settings: dict[str, Any] = {
        "requested": n,
        "schedulable_cores": cores,
        "environment": {k: os.environ[k] for k in THREAD_ENV if k in os.environ},
    }
    with contextlib.ExitStack() as restore:
        # XLA first: it must be settled before JAX (maybe imported by torch's
        # or our own modules) creates its backend.
        if _jax_backend_started():
            settings["xla"] = (
                "not set: JAX had started its backend before the bench; XLA uses "
                "its default, one thread per core it may use"
            )
        elif n < cores and hasattr(os, "sched_setaffinity"):
            before = os.sched_getaffinity(0)
            pinned = set(sorted(before)[:n])
            os.sched_setaffinity(0, pinned)
            restore.callback(os.sched_setaffinity, 0, before)
            settings["affinity"] = sorted(pinned)
            settings["xla"] = (
                f"{n} (process pinned to CPUs {_csv(sorted(pinned))}; "
                "XLA sizes its pool from the cores it may use)"
            )
            if n == 1:
                flags = os.environ.get("XLA_FLAGS", "")
                os.environ["XLA_FLAGS"] = f"{flags} {XLA_ONE_THREAD}".strip()
                restore.callback(_restore_env, "XLA_FLAGS", flags or None)
                settings["xla"] += f"; XLA_FLAGS={XLA_ONE_THREAD}"
        else:
            settings["xla"] = f"{n} (XLA's default: one thread per core it may use)"
        settings["torch"] = _set_torch_threads(n, restore)  # torch's OpenMP too
        restore.enter_context(threadpool_limits(limits=n))  # every pool loaded now
        settings["threadpools"] = [
            {
                "library": info.get("internal_api"),
                "api": info.get("user_api"),
                "num_threads": info.get("num_threads"),
                "architecture": info.get("architecture"),
            }
            for info in threadpool_info()
        ]
        yield settings


def _restore_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _set_torch_threads(n: int, restore: contextlib.ExitStack) -> int | None:
    try:
        import torch
    except ImportError:
        return None
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    restore.callback(torch.set_num_threads, before)
    return torch.get_num_threads()


def cuda_visibility() -> dict[str, str | None]:
    """For torch and JAX, where installed: the CUDA device each sees, or None."""
    found: dict[str, str | None] = {}
    if _installed("torch"):
        import torch

        found["torch"] = (
            torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
        )
    if _installed("jax"):
        import jax

        try:
            found["jax"] = str(jax.devices("gpu")[0].device_kind)
        except RuntimeError:
            found["jax"] = None
    return found


def _installed(framework: str) -> bool:
    try:
        load_backend(framework)
    except BackendMissingError:
        return False
    return True


def resolve_device(asked: str) -> tuple[str, dict[str, str]]:
    """The device to run on, and why some frameworks cannot reach it.

    Returns:
        ("cpu" or "cuda", {framework: reason}) for torch and JAX where they are
        installed but see no CUDA device on a CUDA run (NumPy runs on the CPU
        whatever the device: it is the baseline).

    Raises:
        BenchArgumentError: --device cuda on a machine where no installed
            framework sees a CUDA device.
    """
    if asked == "cpu":
        return "cpu", {}
    seen = cuda_visibility()
    if not any(seen.values()):
        if asked == "auto":
            return "cpu", {}
        parts = [f"{name} sees none" for name in ("torch", "jax") if name in seen] + [
            f"{name} is not installed" for name in ("torch", "jax") if name not in seen
        ]
        raise BenchArgumentError(
            f"--device cuda was asked for, but no CUDA device exists here: "
            f"{', '.join(parts)}; the devices there are: cpu"
        )
    unreachable = {
        name: f"{name} sees no CUDA device (its devices: cpu)"
        for name, device in seen.items()
        if device is None
    }
    return "cuda", unreachable


# The run ----------------------------------------------------------------------


def cpu_model() -> str:
    """The CPU's model name, from /proc/cpuinfo where there is one."""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown"


def header(config: Config, threads: dict[str, Any], gpus: dict) -> dict[str, Any]:
    """What the run was on: CPU, cores, versions, threads, dtype, device."""
    return {
        "cpu": cpu_model(),
        "logical_cores": os.cpu_count(),
        "schedulable_cores": threads["schedulable_cores"],
        "threads": {k: v for k, v in threads.items() if k != "environment"},
        "device": config.device,
        "device_name": ", ".join(f"{k}: {v}" for k, v in gpus.items() if v)
        if config.device == "cuda"
        else cpu_model(),
        "dtype": config.dtype,
        "versions": versions(),
        "environment": threads["environment"],
    }


def print_header(head: dict[str, Any], config: Config) -> None:
    from triptych.bench_report import header_lines

    for line in header_lines(head, config_dict(config)):
        print(line)
    sys.stdout.flush()


def config_dict(config: Config) -> dict[str, Any]:
    d = dataclasses.asdict(config)
    d["T"] = list(config.T)
    d["modes"] = list(config.modes)
    d["d_head"] = config.d_model // config.n_heads
    d["seed"] = SEED
    for key in ("quiet", "output_dir"):
        d.pop(key)
    return d


def available_modes(config: Config, unreachable: dict[str, str]) -> dict[str, str]:
    """{mode name: why it is skipped} for the modes that cannot run here."""
    skipped = {}
    for name in config.modes:
        framework = modes_registry.MODES[name].framework
        try:
            load_backend(framework)
        except BackendMissingError as error:
            skipped[name] = str(error)
            continue
        if framework in unreachable:
            skipped[name] = unreachable[framework]
    return skipped


def run(
    config: Config,
    threads: dict[str, Any],
    unreachable: dict[str, str],
) -> dict[str, Any]:
    """The whole sweep: header, GEMM peak, every mode at every T; the report."""
    from rich.console import Console
    from rich.progress import Progress

    skipped = available_modes(config, unreachable)
    gpus = cuda_visibility() if config.device == "cuda" else {}
    head = header(config, threads, gpus)
    if not config.quiet:
        print_header(head, config)
    runnable = [n for n in config.modes if n not in skipped]
    console = Console(file=sys.stderr)
    disable = config.quiet or not sys.stderr.isatty()
    results = []
    with Progress(console=console, disable=disable, transient=True) as progress:
        task = progress.add_task("GEMM peak", total=1 + len(config.T) * len(runnable))
        peak = gemm_peak(config, skipped)
        progress.advance(task)
        for T in config.T:
            problem = make_problem(
                T,
                d_model=config.d_model,
                n_heads=config.n_heads,
                batch=config.batch,
                dtype=config.dtype,
                device=config.device,
            )
            expected = reference_outputs(problem)
            for name in config.modes:
                mode = modes_registry.MODES[name]
                if name in skipped:
                    results.append(_row(mode, config, T, "skipped", skipped[name]))
                    continue
                progress.update(task, description=f"T={T} {name}")
                results.append(run_point(mode, problem, expected, config))
                progress.advance(task)
                gc.collect()
    derive(results, peak)
    return {
        "schema": SCHEMA,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": command_line(config),
        "header": head,
        "config": config_dict(config),
        "flops": {
            "formula": "8*B*T*C**2 + 2*B*C*T*(T+1)",
            "counts": "4 projections 2*B*T*C*C each; q@k^T and weights@v "
            "2*B*H*D*T*(T+1)/2 each, causal pairs only; softmax not counted",
        },
        "gemm_peak": peak,
        "modes": [
            {
                "name": n,
                "framework": modes_registry.MODES[n].framework,
                "kind": modes_registry.MODES[n].kind,
                "compiled": modes_registry.MODES[n].compiled,
                "eager_twin": modes_registry.MODES[n].eager_twin,
                "summary": modes_registry.MODES[n].summary,
                "available": n not in skipped,
                "reason": skipped.get(n),
            }
            for n in config.modes
        ],
        "results": results,
    }


def make_problem(
    T: int, *, d_model: int, n_heads: int, batch: int, dtype: str, device: str
) -> modes_registry.Problem:
    """The shared fixture of these sizes (seed SEED), cast to dtype: what every
    mode runs at one point of `triptych bench` and of `--memory`."""
    preset = Preset(
        f"bench-T{T}",
        d_model=d_model,
        n_heads=n_heads,
        seed=SEED,
        seq_len=T,
        batch=(batch,),
    )
    fixture = make_fixture(preset).astype(np_dtype(dtype))
    return modes_registry.Problem(fixture, dtype, device)


def reference_outputs(problem: modes_registry.Problem):
    """NumPy's (out, weights) on the problem: what every mode must match."""
    import impl_numpy

    out, weights = impl_numpy.multi_head_attention(*problem.arrays, problem.n_heads)
    return np.asarray(out), np.asarray(weights)


ROW_FIELDS = (
    "mode",
    "framework",
    "kind",
    "compiled",
    "T",
    "status",
    "reason",
    "first_call_s",
    "compile_s",
    "median_s",
    "q25_s",
    "q75_s",
    "iqr_s",
    "min_s",
    "samples",
    "calls_per_sample",
    "useful_gflop",
    "gflops",
    "pct_of_gemm_peak",
    "speedup_vs_numpy",
    "jit_speedup_over",
    "jit_speedup",
    "max_abs_diff_out",
    "max_abs_diff_weights",
    "fused_attention",
)


def _row(mode, config: Config, T: int, status: str, reason=None) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(ROW_FIELDS)
    row.update(
        mode=mode.name,
        framework=mode.framework,
        kind=mode.kind,
        compiled=mode.compiled,
        T=T,
        status=status,
        reason=reason,
        useful_gflop=attention_flops(config.batch, T, config.d_model) / 1e9,
    )
    return row


def run_point(mode, problem, expected, config: Config) -> dict[str, Any]:
    """Build, check and time one mode at one T; its row of results."""
    T = problem.fixture.preset.T
    row = _row(mode, config, T, "ok")
    diffs: dict[str, float | None] = {}

    def check(result) -> bool:
        out, weights = runner.to_numpy(result)
        diffs["out"] = (
            max_abs_diff(out, expected[0]) if out.shape == expected[0].shape else None
        )
        agree = is_close(out, expected[0], config.dtype)
        if weights is not None:
            diffs["weights"] = (
                max_abs_diff(weights, expected[1])
                if weights.shape == expected[1].shape
                else None
            )
            agree = agree and is_close(weights, expected[1], config.dtype)
        return agree

    try:
        runner = mode.build(problem)
        timing, _ = measure(
            runner.call,
            runner.first_call,
            repeats=config.repeats,
            warmup=config.warmup,
            min_sample_s=config.min_sample_s,
            check=check,
        )
        notes = runner.notes()
    except Exception as error:  # one mode failing must not end the sweep
        message = str(error).strip().splitlines()[0] if str(error).strip() else ""
        row.update(status="error", reason=f"{type(error).__name__}: {message}")
        return row
    row.update(
        max_abs_diff_out=diffs.get("out"),
        max_abs_diff_weights=diffs.get("weights"),
        fused_attention=notes.get("fused_attention"),
    )
    if timing is None:
        atol, rtol = tolerance(config.dtype)
        worst = max((d for d in diffs.values() if d is not None), default=None)
        row.update(
            status="wrong",
            reason=(
                f"output differs from NumPy's beyond the {config.dtype} tolerance "
                f"(atol={atol:g}, rtol={rtol:g}): max |diff| = "
                + ("shape mismatch" if worst is None else f"{worst:.3g}")
            ),
        )
        return row
    row.update(
        first_call_s=timing.first_call_s,
        compile_s=timing.first_call_s - timing.median_s if mode.compiled else None,
        median_s=timing.median_s,
        q25_s=timing.q25_s,
        q75_s=timing.q75_s,
        iqr_s=timing.iqr_s,
        min_s=timing.min_s,
        samples=len(timing.samples_s),
        calls_per_sample=timing.calls_per_sample,
        gflops=row["useful_gflop"] / timing.median_s,
    )
    return row


def derive(results: list[dict[str, Any]], peak: dict[str, Any]) -> None:
    """Fill the figures that compare rows: % of peak and the speedups."""
    ok = {(r["mode"], r["T"]): r for r in results if r["status"] == "ok"}
    for row in ok.values():
        if peak.get("gflops"):
            row["pct_of_gemm_peak"] = 100 * row["gflops"] / peak["gflops"]
        numpy_row = ok.get(("numpy", row["T"]))
        if numpy_row is not None:
            row["speedup_vs_numpy"] = numpy_row["median_s"] / row["median_s"]
        twin = modes_registry.MODES[row["mode"]].eager_twin
        if twin is not None:
            row["jit_speedup_over"] = twin
            twin_row = ok.get((twin, row["T"]))
            if twin_row is not None:
                row["jit_speedup"] = twin_row["median_s"] / row["median_s"]


# The machine's matrix-multiply peak -------------------------------------------


def gemm_peak(config: Config, skipped: dict[str, str]) -> dict[str, Any]:
    """float32 (n, n) @ (n, n) GFLOP/s of each framework here; the best is the peak.

    NumPy counts only on a CPU run; torch and JAX on the run's device.
    """
    n = config.gemm_size
    rng = np.random.default_rng(SEED)
    a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    frameworks = {modes_registry.MODES[m].framework for m in config.modes}
    frameworks -= {modes_registry.MODES[m].framework for m in skipped}
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

    a_j, b_j = (jax.device_put(m, modes_registry.jax_device(device)) for m in (a, b))
    matmul = jax.jit(lambda a, b: a @ b)
    return lambda: jax.block_until_ready(matmul(a_j, b_j))
