"""The clock of `triptych bench`: first call, steady state, and FLOP counts.

The method (also in the README and in every bench.md):

- First call: one call of a freshly built runner, timed on its own. For a
  compiled mode it holds the trace, the compile and one run; a new T is a new
  build and so a new compile. Nothing is compiled inside the timing loop.
- Warm-up: `warmup` more calls, not timed.
- Steady state: `repeats` samples. A sample is the mean of k back-to-back calls,
  k chosen from the last call before the samples (the last warm-up call, or the
  first call when there is no warm-up) so that a sample lasts at least
  `min_sample_s` (k = 1 for any call slower than that), the way `timeit` picks
  its number.
  Reported: the median of the samples and their interquartile range.
- Every call returns only when its outputs are computed (the runner
  synchronizes), and Python's garbage collector is off while a sample runs.

Useful FLOPs count what causal attention needs, not what a version does:

    projections   4 · 2·B·T·C²      (q, k, v and the output, each x @ W)
    q @ kᵀ        2·B·H·D · T(T+1)/2 (only the pairs j <= i: T(T+1)/2 of them)
    weights @ v   2·B·H·D · T(T+1)/2
    total         8·B·T·C² + 2·B·C·T(T+1)     (H·D = C)

Softmax, scaling and masking are not counted. A version that computes the full
T×T square does about twice the attention work and is charged for half of it.

A training step (`triptych bench --train`) counts three times its forward's
matrix work (the backward does twice the forward's): L attentions as above
and the unembedding, 2·B·T·C·V; embedding, cross-entropy and Adam not counted.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from triptych.bench.problem import TRAIN_LAYERS, train_vocab

NOISY_IQR = 0.25
"""A row is noisy when its interquartile range exceeds this share of its
median: its figures, and the speedups made from them, are not to be trusted."""
NOISY_FASTEST = 0.5
"""... or when its fastest sample is under this share of its median: with
few samples (--quick takes 3) a stall over most of them inflates the median
and leaves the IQR small; the fastest shows what the machine could do."""


def noisy(median_s: float, iqr_s: float, min_s: float) -> bool:
    """Whether a row's spread is large against its median (NOISY_IQR,
    NOISY_FASTEST)."""
    return iqr_s > NOISY_IQR * median_s or min_s < NOISY_FASTEST * median_s


@dataclass(frozen=True)
class Timing:
    """The clock's readings for one mode at one point of the sweep.

    Attributes:
        first_call_s: seconds of the first call (trace + compile + run if
            compiled).
        samples_s: seconds per call, one entry per sample.
        calls_per_sample: k, the calls averaged in each sample.
    """

    first_call_s: float
    samples_s: tuple[float, ...]
    calls_per_sample: int

    @property
    def median_s(self) -> float:
        """Median seconds per call over the samples."""
        return float(np.median(self.samples_s))

    @property
    def q25_s(self) -> float:
        """First quartile of the samples."""
        return float(np.percentile(self.samples_s, 25))

    @property
    def q75_s(self) -> float:
        """Third quartile of the samples."""
        return float(np.percentile(self.samples_s, 75))

    @property
    def iqr_s(self) -> float:
        """Interquartile range of the samples: the spread."""
        return self.q75_s - self.q25_s

    @property
    def min_s(self) -> float:
        """The fastest sample."""
        return float(min(self.samples_s))


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
"""What a second is: "wall", the wall clock (the default); "cpu", this
process's CPU time, every thread's, which other processes on a busy machine
do not inflate (meaningful with one thread: with more it adds them up)."""
_clock = CLOCKS["wall"]


@contextlib.contextmanager
def clock(name: str) -> Iterator[None]:
    """Time with CLOCKS[name] inside the block, then with the clock before."""
    global _clock
    before, _clock = _clock, CLOCKS[name]
    try:
        yield
    finally:
        _clock = before


def time_first_call(call: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds of one call, and what it returned."""
    start = _clock()
    result = call()
    return _clock() - start, result


def time_steady(
    call: Callable[[], Any],
    *,
    repeats: int,
    warmup: int,
    min_sample_s: float,
    first_call_s: float,
    max_calls_per_sample: int = 1000,
) -> tuple[tuple[float, ...], int]:
    """Warm up, then `repeats` samples of seconds per call.

    Args:
        first_call_s: seconds of the call made before this one (the first
            call); k comes from it when `warmup` is 0.

    Returns:
        (seconds per call of each sample, calls per sample).
    """
    last = first_call_s
    for _ in range(warmup):
        last, _ = time_first_call(call)
    calls = max(1, min(max_calls_per_sample, math.ceil(min_sample_s / max(last, 1e-9))))
    samples = []
    gc_was_enabled = gc.isenabled()
    try:
        for _ in range(repeats):
            gc.disable()
            start = _clock()
            for _ in range(calls):
                result = call()
            elapsed = _clock() - start
            del result
            if gc_was_enabled:
                gc.enable()
            samples.append(elapsed / calls)
    finally:
        if gc_was_enabled:
            gc.enable()
    return tuple(samples), calls


SETTLE_MAX_S = 0.5
"""The longest `settle` waits for the last framework's worker threads to go
idle. A library's workers spin for a while after its last parallel call
before they sleep: OpenBLAS's (NumPy's) for 2^28 cycles, about 0.1 s. A
framework timed meanwhile on the same cores waits, at every parallel region,
for a worker of its own that a spinning one keeps off a core: on 2 cores and
2 threads, torch's 128 x 128 GEMM timed right after NumPy's took 16 ms a
call, 400 times its 0.04 ms (docs/bench.md, "Method")."""
SETTLE_WINDOW_S = 0.02
"""Idle means the process's other threads ran less than SETTLE_BUSY_SHARE of
one window this long, twice in a row."""
SETTLE_BUSY_SHARE = 0.1
_last_timed: list[str | None] = [None]


def settle(framework: str | None) -> None:
    """When `framework` is not the one timed last: wait (SETTLE_MAX_S at
    most) until the process's other threads are idle. Where Linux's
    /proc/self/task cannot tell, nothing is waited for."""
    if framework is None or framework == _last_timed[0]:
        return
    if _last_timed[0] is not None:
        deadline = time.monotonic() + SETTLE_MAX_S
        before, quiet = _others_cpu_ns(), 0
        while before is not None and quiet < 2 and time.monotonic() < deadline:
            time.sleep(SETTLE_WINDOW_S)
            now = _others_cpu_ns()
            busy = (
                now is None or now - before >= SETTLE_BUSY_SHARE * SETTLE_WINDOW_S * 1e9
            )
            quiet = 0 if busy else quiet + 1
            before = now
    _last_timed[0] = framework


def forget_last_timed() -> None:
    """A new sweep: its first framework waits for nothing of an earlier one's."""
    _last_timed[0] = None


def _others_cpu_ns() -> int | None:
    """Nanoseconds on a CPU of this process's threads but the calling one
    (/proc/self/task/*/schedstat); None where there is no such file."""
    me = str(threading.get_native_id())
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    total = 0
    for task in tasks:
        if task == me:
            continue
        try:
            with open(f"/proc/self/task/{task}/schedstat") as stat:
                total += int(stat.read().split()[0])
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
        except (OSError, ValueError, IndexError):  # no schedstat here
            return None
    return total


def measure(
    call: Callable[[], Any],
    first_call: Callable[[], Any] | None = None,
    *,
    repeats: int,
    warmup: int,
    min_sample_s: float,
    check: Callable[[Any], bool] | None = None,
    framework: str | None = None,
) -> tuple[Timing | None, Any]:
    """The first call, then (if `check` accepts its result) the steady state;
    first, a pause if `framework` is not the one timed last (`settle`).

    Returns:
        (Timing, first result), or (None, first result) when `check` rejects it:
        a wrong result is not timed.
    """
    settle(framework)
    first_s, result = time_first_call(first_call or call)
    if check is not None and not check(result):
        return None, result
    samples, calls = time_steady(
        call,
        repeats=repeats,
        warmup=warmup,
        min_sample_s=min_sample_s,
        first_call_s=first_s,
    )
    return Timing(first_s, samples, calls), result


def attention_flops(B: int, T: int, C: int) -> int:
    """Useful FLOPs of one causal self-attention forward (see the module doc)."""
    projections = 4 * 2 * B * T * C * C
    causal_pairs = T * (T + 1) // 2
    scores = 2 * B * C * causal_pairs  # q @ k^T, summed over the H heads of width D
    weighted_values = 2 * B * C * causal_pairs  # weights @ v
    return projections + scores + weighted_values


def gemm_flops(n: int) -> int:
    """FLOPs of one (n, n) @ (n, n) matrix multiply: 2n³."""
    return 2 * n**3


def train_step_flops(B: int, T: int, C: int) -> int:
    """Useful FLOPs of one training step of the --train model (module doc)."""
    forward = TRAIN_LAYERS * attention_flops(B, T, C) + 2 * B * T * C * train_vocab(T)
    return 3 * forward


WORK = {
    "attention": (
        attention_flops,
        "8*B*T*C**2 + 2*B*C*T*(T+1)",
        "4 projections 2*B*T*C*C each; q@k^T and weights@v 2*B*H*D*T*(T+1)/2 "
        "each, causal pairs only; softmax not counted",
    ),
    "training step": (
        train_step_flops,
        "3*(L*(8*B*T*C**2 + 2*B*C*T*(T+1)) + 2*B*T*C*V), L = 2, V = max(64, T/2)",
        "the forward's matrix work (L attentions, the unembedding) three times: "
        "once forward, twice backward; embedding, cross-entropy and Adam not "
        "counted",
    ),
}
"""What a mode's `work` is: (its useful FLOPs (B, T, C) -> int, the formula,
what it counts)."""
