"""Where the time goes: each mode's call split into matrix products, the
softmax's elementwise work and memory layout, measured by each framework's
own instrument (`triptych bench`, the breakdown pass after a mode is timed).

    torch   torch.profiler over CALLS calls: every ATen operation's own time
            (self CPU time; a parallel operation counts once), classified by
            its name (OPERATIONS); for a torch.compile mode, inductor's
            generated C++ kernels are the compiled graph's own time, counted
            as elementwise (they hold the mask, the softmax and the copies).
    jax     jax.profiler's trace of CALLS calls: every XLA operation (thunk)
            that ran, by the name XLA gave it ("ynn_fusion.3" a matrix product
            through YNNPACK, "loop_exponential_reduce_fusion" elementwise,
            "copy_bitcast_fusion" a copy), innermost events only; and, for a
            jax.jit mode, XLA's own count of the compiled program's FLOPs,
            transcendentals and bytes (`Compiled.cost_analysis()`).
    numpy   NumPy has no profiler that sees into its calls, so a thread
            samples, every SAMPLE_S while the mode runs, the Python line of
            each thread in impl_numpy's code (the calling thread, and the
            workers of impl_numpy/tuned.py; NumPy and the BLAS release the GIL
            inside a call, so a sample lands on the line that is running) and
            each line is classified by its source text: `@` a product,
            exp/max/sum/where the softmax, moveaxis/reshape/concatenate/empty
            a layout. With workers, their lines add up to more than the wall
            time and the shares are of their sum (`summary`).

The categories, in every framework (CATEGORIES): "matmul" (GEMMs), "softmax"
(exp, max, sum, subtract, divide, the mask: the elementwise work of the
softmax and the NaN rule), "memory" (copies, transposes, concatenation,
allocation: moving bytes without arithmetic), "fused" (a fused attention
kernel whose products and softmax cannot be told apart: torch's SDPA) and
"other" (what the instrument does not attribute: Python, dispatch, waiting
for a thread). Each is a share of the profiled call's wall time.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import linecache
import os
import re
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from shared import registry

CATEGORIES = ("matmul", "softmax", "memory", "fused", "other")
CALLS = 3
"""Calls profiled per mode and T (after its timing, so warm)."""
SAMPLE_S = 0.0005
"""NumPy's sampling interval."""

OPERATIONS = {
    # mkldnn::_linear_pointwise: oneDNN's matmul (impl_torch/tuned.py)
    "matmul": re.compile(
        r"^aten::(mm|bmm|addmm|baddbmm|addbmm|dot|mv|linear)$"
        r"|^mkldnn::_linear_pointwise$"
    ),
    "fused": re.compile(r"scaled_dot_product|flash_attention|efficient_attention"),
    "softmax": re.compile(
        r"^aten::(_?softmax|_?log_softmax|exp_?|amax|max|maximum|sum|sub_?|rsub|"
        r"div_?|mul_?|add_?|where|masked_fill_?|log|isfinite|all|any|cumsum|"
        r"gt|lt|ge|le|eq|ne|logical_not|bitwise_not|neg|sqrt|clamp)$"
        r"|^## Call CompiledFxGraph"
    ),
    "memory": re.compile(
        r"^aten::(copy_|clone|contiguous|cat|stack|empty|empty_like|empty_strided|"
        r"zeros|zeros_like|ones|full|full_like|fill_|zero_|index|index_put_|"
        r"_to_copy|to|triu|tril|reshape|view|_unsafe_view|transpose|permute|"
        r"movedim|slice|select|expand|as_strided|t|unsqueeze|squeeze|split|"
        r"unbind|narrow|_reshape_alias|alias|detach|lift_fresh)$"
    ),
}
"""torch: an ATen operation's category by its name (the first that matches)."""

XLA_NAMES = (
    ("matmul", re.compile(r"dot|ynn|gemm|matmul|conv|xnn|onednn|custom-call")),
    (
        "softmax",
        re.compile(
            r"exp|reduce|max|min|sum|subtract|divide|multiply|add|select|log|"
            r"compare|is-finite|negate|cumsum|and|or|not|sqrt|clamp"
        ),
    ),
    (
        "memory",
        re.compile(
            r"copy|transpose|concatenate|slice|bitcast|broadcast|pad|reshape|"
            r"dynamic-update|iota|gather|scatter|constant"
        ),
    ),
)
"""JAX: an XLA operation's category by the name XLA gave it (first match)."""
XLA_WRAPPERS = re.compile(r"^(ThunkExecutor|while|conditional|call|\$|PjitFunction)")
"""Trace events that contain operations rather than being one."""

NUMPY_LINES = (
    ("matmul", re.compile(r"@|\bmatmul\b|\beinsum\b|\bdot\(")),
    (
        "softmax",
        re.compile(
            r"\bexp\b|\.max\(|\.sum\(|\bmaximum\b|softmax|\binf\b|\blog\b|"
            r"\bwhere\b|-=|/=|\*=|\bdivide\b|\bsubtract\b|/ |finite|\bnan\b"
        ),
    ),
    (
        "memory",
        re.compile(
            r"moveaxis|swapaxes|ascontiguousarray|reshape|concatenate|\bempty\b|"
            r"zeros|full_like|\bfull\b|astype|split_heads|merge_heads|\.copy\(|"
            r"\] = "
        ),
    ),
)
"""NumPy: a source line's category by its text (first match)."""


def profile(mode, runner) -> dict[str, Any] | None:
    """The breakdown of one warm runner of `mode`; None when its framework
    has no instrument here."""
    profilers = {"torch.profiler": _torch, "jax.profiler": _jax, "lines": _numpy}
    measure = profilers.get(registry.get(mode.framework).profiler)
    if measure is None:
        return None
    seconds, wall, extra = measure(runner)
    return summary(seconds, wall, extra)


def summary(
    seconds: dict[str, float], wall: float, extra: dict[str, Any]
) -> dict[str, Any]:
    """{method, wall_s, seconds {category}, shares {category}, ...extra}: the
    categories' seconds per call and their shares of the call's wall time;
    "other" is what they leave of it. If the measured categories add up to
    more than the wall time (operations on several threads at once), the
    shares are of their sum instead."""
    measured = {c: seconds.get(c, 0.0) for c in CATEGORIES if c != "other"}
    total = sum(measured.values())
    whole = max(wall, total)
    measured["other"] = whole - total
    return {
        **extra,
        "wall_s": wall,
        "seconds": measured,
        "shares": {c: (s / whole if whole > 0 else None) for c, s in measured.items()},
    }


# torch --------------------------------------------------------------------------


def classify_torch(name: str) -> str:
    """The category of an ATen operation (or a compiled graph) by its name."""
    for category in ("fused", "matmul", "softmax", "memory"):
        if OPERATIONS[category].search(name):
            return category
    return "other"


KINETO_QUIET = "6"
"""libkineto's log level above all its severities (its highest, USDT, is 5)."""


def quiet_torch_profiler() -> None:
    """Keep torch.profiler's own log off the terminal: libkineto writes a
    "profiler_start" and a "profiler_stop" line to stderr every time it runs,
    between the bench's progress lines. It reads KINETO_LOG_LEVEL when the
    first profile starts, so this runs before (`_torch`, every profile); a
    level the user set wins. The
    cost: libkineto's own errors are not printed either (a profile it could
    not take would show no operations: all of the call's time "other")."""
    os.environ.setdefault("KINETO_LOG_LEVEL", KINETO_QUIET)


def _torch(runner):
    quiet_torch_profiler()
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        for _ in range(CALLS):
            runner.call()
        wall = (time.perf_counter() - start) / CALLS
    seconds: dict[str, float] = {}
    for event in prof.key_averages():
        category = classify_torch(event.key)
        if category == "other":
            continue  # wrappers (compiled regions, dynamo), counted as what is left
        seconds[category] = seconds.get(category, 0.0) + (
            event.self_cpu_time_total / 1e6 / CALLS
        )
    return seconds, wall, {"method": "torch.profiler, self CPU time per operation"}


# JAX ----------------------------------------------------------------------------


def classify_xla(name: str) -> str:
    """The category of an XLA operation by the name XLA gave it."""
    for category, pattern in XLA_NAMES:
        if pattern.search(name):
            return category
    return "other"


def leaf_events(events: list[dict]) -> list[dict]:
    """The complete ("X") events of a Chrome trace that contain no other event
    of their thread: the operations, not the loops or executors around them."""
    by_thread: dict[Any, list[dict]] = {}
    for event in events:
        if event.get("ph") == "X" and "dur" in event:
            by_thread.setdefault((event.get("pid"), event.get("tid")), []).append(event)
    leaves = []
    for thread in by_thread.values():
        thread.sort(key=lambda e: (e["ts"], -e["dur"]))
        for index, event in enumerate(thread):
            end = event["ts"] + event["dur"]
            following = thread[index + 1] if index + 1 < len(thread) else None
            if following is None or following["ts"] >= end:
                leaves.append(event)
    return leaves


def xla_seconds(events: list[dict], calls: int) -> dict[str, float]:
    """Seconds per call of each category, from a trace's operations: the
    events XLA's thunk executor marks with the HLO operation they run
    (args.hlo_op), the innermost of them (a while loop's body, not the loop)."""
    operations = [e for e in events if (e.get("args") or {}).get("hlo_op")]
    seconds: dict[str, float] = {}
    for event in leaf_events(operations):
        name = event["args"]["hlo_op"]
        if XLA_WRAPPERS.search(name):
            continue
        category = classify_xla(name)
        if category == "other":
            continue
        seconds[category] = seconds.get(category, 0.0) + event["dur"] / 1e6 / calls
    return seconds


def _jax(runner):
    import jax

    extra: dict[str, Any] = {"method": "jax.profiler trace, XLA operations"}
    if runner.compiled is not None:
        with contextlib.suppress(Exception):  # no cost analysis on some backends
            cost = runner.compiled().cost_analysis()
            cost = cost[0] if isinstance(cost, list) else cost
            extra["xla_cost"] = {
                "flops": cost.get("flops"),
                "transcendentals": cost.get("transcendentals"),
                "bytes_accessed": cost.get("bytes accessed"),
            }
    with tempfile.TemporaryDirectory() as folder:
        jax.profiler.start_trace(folder, create_perfetto_trace=True)
        try:
            start = time.perf_counter()
            for _ in range(CALLS):
                runner.call()
            wall = (time.perf_counter() - start) / CALLS
        finally:
            jax.profiler.stop_trace()
        traces = sorted(Path(folder).rglob("perfetto_trace.json.gz"))
        if not traces:
            return {}, wall, {**extra, "method": "jax.profiler wrote no trace"}
        with gzip.open(traces[-1]) as file:
            trace = json.load(file)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    return xla_seconds(events, CALLS), wall, extra


# NumPy --------------------------------------------------------------------------


def classify_line(text: str) -> str:
    """The category of a NumPy source line by its text (comments dropped)."""
    code = text.split("#", 1)[0]
    for category, pattern in NUMPY_LINES:
        if pattern.search(code):
            return category
    return "other"


def _innermost_line(frame, roots: tuple[str, ...]):
    """(file, line) of the innermost frame whose file is under one of `roots`."""
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(roots):
            return filename, frame.f_lineno
        frame = frame.f_back
    return None


def _numpy(runner):
    import impl_numpy

    roots = (str(Path(impl_numpy.__file__).parent),)
    target = threading.get_ident()
    samples: dict[tuple[str, int] | None, int] = {}
    done = threading.Event()

    ticks = 0

    def sample():
        nonlocal ticks
        sampler = threading.get_ident()
        while not done.is_set():
            time.sleep(SAMPLE_S)
            ticks += 1
            for thread, frame in sys._current_frames().items():
                where = _innermost_line(frame, roots)
                if thread == sampler or (where is None and thread != target):
                    continue  # this thread, or one outside impl_numpy
                samples[where] = samples.get(where, 0) + 1

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.perf_counter()
    try:
        for _ in range(CALLS):
            runner.call()
    finally:
        wall = (time.perf_counter() - start) / CALLS
        done.set()
        sampler.join()
    count = sum(samples.values()) or 1
    per_tick = wall / (ticks or 1)  # of a call's wall time, one thread's sample
    seconds: dict[str, float] = {}
    lines = []
    for where, n in samples.items():
        if where is None:
            continue
        text = linecache.getline(*where).strip()
        category = classify_line(text)
        lines.append((n, where, text, category))
        if category != "other":
            seconds[category] = seconds.get(category, 0.0) + per_tick * n
    lines.sort(key=lambda item: -item[0])
    top = [
        {
            "line": f"{Path(file).parent.name}/{Path(file).name}:{lineno}",
            "share": n / count,
            "category": category,
            "code": text,
        }
        for n, (file, lineno), text, category in lines[:5]
    ]
    method = f"sampled Python lines every {SAMPLE_S * 1e3:g} ms ({count} samples)"
    return seconds, wall, {"method": method, "top_lines": top}
