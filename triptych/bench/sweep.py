"""The time sweep of `triptych bench`: every mode at every T, checked, then timed.

For every mode of the registry (`triptych.bench.modes`) and every T, on the
shared fixture (`triptych.bench.problem`): the first call (trace and compile)
on its own, the steady state (median and IQR, see `triptych.bench.timing`),
useful GFLOP/s and their share of a float32 GEMM measured in the same run
(`triptych.bench.gemm`), the speedup of jit over eager within each framework
and of every mode over NumPy. Before any of it, the mode's output must match
NumPy's at the dtype's tolerance (`shared.tolerances`); one that does not is
reported as wrong and not timed. The report it returns, and the files made
from it, are described in `triptych.bench.report`.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import json
import os
import sys
from pathlib import Path
from typing import Any

from shared import registry
from shared.tolerances import is_close, max_abs_diff, tolerance
from triptych.bench import breakdown, load, roofline, timing
from triptych.bench.config import (
    TimeConfig,
)
from triptych.bench.gemm import cpu_features, gemm_libraries, gemm_peak
from triptych.bench.machine import cpu_model, cuda_visibility
from triptych.bench.modes import MODES
from triptych.bench.problem import (
    blockwise_outputs,
    make_problem,
    reference_outputs,
)
from triptych.bench.report import ROW_FIELDS, SCHEMA, TIMING_FIELDS, say
from triptych.bench.scaling import scaling_fits
from triptych.bench.settings import command_line, config_dict
from triptych.bench.summary import header_lines
from triptych.bench.timing import WORK, measure, noisy
from triptych.common import status
from triptych.common.backends import BackendMissingError, load_backend, versions
from triptych.common.resident import heap_frozen


def header(
    config: TimeConfig, threads: dict[str, Any], gpus: dict, load_before: dict
) -> dict[str, Any]:
    """What the run was on: CPU, cores, versions, threads, dtype, device, and
    the machine's load before the sweep (`triptych.bench.load`; the load
    during it is added when the sweep ends)."""
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
        "cpu_features": cpu_features(),
        "gemm_libraries": gemm_libraries(_installed_frameworks(config), threads)
        if config.device == "cpu"
        else {},
        "load": {"before": load_before, "during": None},
    }


def _installed_frameworks(config: TimeConfig) -> set[str]:
    """NumPy and the frameworks of the run's modes that are installed."""
    frameworks = {registry.reference().name}
    for name in config.modes:
        with contextlib.suppress(BackendMissingError):
            load_backend(MODES[name].framework)
            frameworks.add(MODES[name].framework)
    return frameworks


def print_header(head: dict[str, Any], config: TimeConfig) -> None:
    say("\n".join(header_lines(head, config_dict(config))))
    sys.stdout.flush()


def load_frameworks(frameworks) -> None:
    """Import the frameworks the modes need, where installed (a missing one
    is reported by `available_modes`): the slow imports, done first and
    named on the terminal."""
    for framework in frameworks:
        with contextlib.suppress(BackendMissingError):
            load_backend(framework)


def available_modes(config: TimeConfig, unreachable: dict[str, str]) -> dict[str, str]:
    """{mode name: why it is skipped} for the modes that cannot run here."""
    skipped = {}
    for name in config.modes:
        framework = MODES[name].framework
        try:
            load_backend(framework)
        except BackendMissingError as error:
            skipped[name] = str(error)
            continue
        if framework in unreachable:
            skipped[name] = unreachable[framework]
        elif reason := MODES[name].unavailable(config.device):
            skipped[name] = reason
    return skipped


def run(
    config: TimeConfig,
    threads: dict[str, Any],
    unreachable: dict[str, str],
    results: list[dict[str, Any]],
) -> dict[str, Any]:
    """The whole sweep: header, GEMM peak, every mode at every T; the report.

    Args:
        results: where the rows go, one as each point ends (so that a sweep
            cut short by Ctrl-C leaves those done); the report holds them too.
    """
    skipped = available_modes(config, unreachable)
    timing.forget_last_timed()
    gpus = cuda_visibility() if config.device == "cuda" else {}
    with status.shown("measuring the machine's load", quiet=config.quiet):
        head = header(config, threads, gpus, load.before())
    if not config.quiet:
        print_header(head, config)
    runnable = [n for n in config.modes if n not in skipped]
    details: list[dict[str, Any]] = []  # the breakdown of each point profiled
    start = load.read()
    with (
        status.progress(quiet=config.quiet) as progress,
        timing.clock(config.clock),
        heap_frozen(),
    ):
        task = progress.add_task("GEMM peak", total=1 + len(config.T) * len(runnable))
        peak = gemm_peak(config, skipped)
        frameworks = {MODES[m].framework for m in runnable}
        progress.update(task, description="memory bandwidth")  # a copy beyond the LLC
        bandwidth = roofline.memory_bandwidth(
            config.bandwidth_mib, frameworks, config.repeats
        )
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
            references = {}  # each mode's reference, computed once per T
            for name in config.modes:
                mode = MODES[name]
                if name in skipped:
                    results.append(_row(mode, config, T, "skipped", skipped[name]))
                    continue
                progress.update(
                    task, description=f"T={T} {mode.name}", note=building(mode)
                )
                reference = mode.reference or (
                    blockwise_outputs if config.scaling else reference_outputs
                )
                if reference not in references:
                    references[reference] = _reference(reference, problem)
                results.append(
                    run_point(mode, problem, references[reference], config, details)
                )
                progress.advance(task)
                gc.collect()
    head["load"]["during"] = load.summary(start, load.read())
    derive(results, peak)
    roofline.add_roofline(results, config_dict(config), peak, bandwidth)
    scaling = scaling_fits(results, memory_run(config)) if config.scaling else None
    return {
        "schema": SCHEMA,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": command_line(config),
        "header": head,
        "config": config_dict(config),
        "flops": {
            work: {"formula": formula, "counts": counts}
            for work, (_, formula, counts) in WORK.items()
            if any(MODES[n].work == work for n in config.modes)
        },
        "gemm_peak": peak,
        "bandwidth": bandwidth,
        "breakdown": details,
        "scaling": scaling,
        "modes": [
            {
                "name": n,
                "framework": MODES[n].framework,
                "kind": MODES[n].kind,
                "compiled": MODES[n].compiled,
                "eager_twin": MODES[n].eager_twin,
                "summary": MODES[n].summary,
                "available": n not in skipped,
                "reason": skipped.get(n),
            }
            for n in config.modes
        ],
        "results": results,
    }


def memory_run(config: TimeConfig) -> dict[str, Any] | None:
    """memory.json of a `triptych bench --memory` run in the same output
    directory at the same sizes and dtype, whose slopes give --scaling its
    memory exponents; None where there is none."""
    path = Path(config.output_dir) / "memory.json"
    try:
        memory = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    same = ("d_model", "n_heads", "batch", "dtype")
    theirs = memory.get("config", {})
    if any(theirs.get(key) != getattr(config, key) for key in same):
        return None
    return memory


def building(mode) -> str | None:
    """The note on a compiled mode's progress line: the compiler that works
    during its first call (None for an eager mode). On a narrow terminal the
    note gives way before the mode's name (status.with_note)."""
    if not mode.compiled:
        return None
    compiler = mode.compiler or registry.get(mode.framework).compiler.name
    return f"{compiler} compiles its first call"


def _reference(reference, problem):
    """What the modes of a reference must match at this point; the error
    instead, if it cannot be computed (then each of them reports it)."""
    try:
        return reference(problem)
    except Exception as error:
        return error


def _row(mode, config: TimeConfig, T: int, status: str, reason=None) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(ROW_FIELDS)
    row.update(
        mode=mode.name,
        framework=mode.framework,
        kind=mode.kind,
        compiled=mode.compiled,
        T=T,
        status=status,
        reason=reason,
        useful_gflop=WORK[mode.work][0](config.batch, T, config.d_model) / 1e9,
    )
    return row


def run_point(
    mode, problem, expected, config: TimeConfig, details: list | None = None
) -> dict[str, Any]:
    """Build, check and time one mode at one T; its row of results. With
    config.breakdown, profile it too: the shares go in the row, the whole
    breakdown (triptych.bench.breakdown) is appended to `details`."""
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
        if isinstance(expected, Exception):
            raise expected
        runner = mode.build(problem)
        timing, _ = measure(
            runner.call,
            runner.first_call,
            repeats=config.repeats,
            warmup=config.warmup,
            min_sample_s=config.min_sample_s,
            check=check,
            framework=mode.framework,
        )
        notes = runner.notes()
        profiled = None
        if timing is not None and config.breakdown:
            profiled = breakdown.profile(mode, runner)
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
    measured = (  # in the order of TIMING_FIELDS
        timing.first_call_s,
        timing.median_s,
        timing.q25_s,
        timing.q75_s,
        timing.iqr_s,
        timing.min_s,
        len(timing.samples_s),
        timing.calls_per_sample,
        row["useful_gflop"] / timing.median_s,  # gflops
    )
    row.update(zip(TIMING_FIELDS, measured, strict=True))
    row["noisy"] = noisy(timing.median_s, timing.iqr_s, timing.min_s)
    if mode.compiled:
        row["compile_s"] = timing.first_call_s - timing.median_s
    if profiled is not None:
        row.update({f"share_{c}": v for c, v in profiled["shares"].items()})
        cost = profiled.get("xla_cost") or {}
        row.update(xla_flops=cost.get("flops"), xla_bytes=cost.get("bytes_accessed"))
        if details is not None:
            details.append({"mode": mode.name, "T": T, **profiled})
    return row


def derive(results: list[dict[str, Any]], peak: dict[str, Any]) -> None:
    """Fill the figures that compare rows: % of peak and the speedups."""
    ok = {(r["mode"], r["T"]): r for r in results if r["status"] == "ok"}
    for row in ok.values():
        if peak.get("gflops"):
            row["pct_of_gemm_peak"] = 100 * row["gflops"] / peak["gflops"]
        numpy_row = ok.get((MODES[row["mode"]].baseline, row["T"]))
        if numpy_row is not None:
            row["speedup_vs_numpy"] = numpy_row["median_s"] / row["median_s"]
        twin = MODES[row["mode"]].eager_twin
        if twin is not None:
            row["jit_speedup_over"] = twin
            twin_row = ok.get((twin, row["T"]))
            if twin_row is not None:
                row["jit_speedup"] = twin_row["median_s"] / row["median_s"]
