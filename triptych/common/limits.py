"""Sizes that cannot fit, refused before any work: one line, exit code 2.

A command adds up the arrays that the sizes it was given certainly allocate
(`Array`: what it is, its shape, its bytes per number and the option that
sets its size) and calls `refuse_unless_fits`, which compares the sum with
the memory this machine has available (`available_bytes`, from the OS). Only
arrays that certainly exist together are counted, so the sum is a lower bound
and a refusal is sure: a size that passes may still be too large, one that is
refused can never run. The float64 oracle's loops are slow rather than large:
`refuse_unless_in_time` times them on a tiny problem and refuses a size whose
loops would take longer than the command may wait. docs/commands.md#sizes."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from triptych.common.errors import CommandError

MEMINFO = "/proc/meminfo"

ORACLE_LIMIT_S = 900.0
"""The longest the oracle's loops may take where a command has no timeout of
its own: as long as `triptych check` gives a target and `triptych shard` a
launch by default."""


class TooLargeError(CommandError):
    """A size the machine cannot hold, or whose oracle would not end in time."""


class Array(NamedTuple):
    """One array a command will allocate: its name as the user knows it, e.g.
    "the (H, T, T) weights", its shape, bytes per number, and the options that
    set its size, the first the one to change ("--T", "--batch")."""

    what: str
    shape: tuple[int, ...]
    itemsize: int
    options: tuple[str, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.itemsize


def available_bytes() -> int:
    """The memory this machine has available now: MemAvailable in
    /proc/meminfo (Linux), else the free physical pages (os.sysconf), else
    the physical memory, else unbounded (no refusal on memory)."""
    try:
        with open(MEMINFO) as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    for pages in ("SC_AVPHYS_PAGES", "SC_PHYS_PAGES"):
        try:
            return os.sysconf(pages) * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            continue
    return 2**80


def size_text(nbytes: float) -> str:
    """'728 TiB', '1.5 GiB', '512 bytes'."""
    for unit, size in (("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30),
                       ("MiB", 2**20), ("KiB", 2**10)):  # fmt: skip
        if nbytes >= size:
            return f"{nbytes / size:.3g} {unit}"
    return f"{int(nbytes)} bytes"


def refuse_unless_fits(
    arrays: Iterable[Array],
    asked: Mapping[str, object],
    defaults: Mapping[str, object] | None = None,
) -> None:
    """Raise TooLargeError, one line, if `arrays` together need more memory
    than is available: it names the options of the largest array and their
    values (`asked[option]`; those left at their `defaults` only if no other
    is given), the memory needed and the memory available.

    Example: "--d-model 10000000 needs 2.84 PiB of memory (the four (C, C)
    weights: 2.84 PiB), and this machine has 21.9 GiB available: give a
    smaller --d-model"
    """
    arrays = list(arrays)
    needed = sum(a.nbytes for a in arrays)
    available = available_bytes()
    if needed <= available:
        return
    largest = max(arrays, key=lambda a: a.nbytes)
    defaults = defaults or {}
    options = [o for o in largest.options if asked[o] != defaults.get(o)]
    options = options or list(largest.options[:1])
    given = ", ".join(f"{o} {asked[o]}" for o in options)
    raise TooLargeError(
        f"{given} need{'s' * (len(options) == 1)} {size_text(needed)} of memory "
        f"({largest.what}: {size_text(largest.nbytes)}), and this machine has "
        f"{size_text(available)} available: give a smaller " + " or ".join(options)
    )


def oracle_seconds(batch: int, H: int, T: int, C: int) -> float:
    """About how long the float64 oracle (shared.reference) takes on x
    (batch, T, C) with H heads, on this machine. Its loops cost each head
    something per query row and something per (query, key) pair it visits,
    T * (T + 1) / 2 of them, and per pair a sum of D = C / H products; both
    are timed here on two tiny problems (one head of that D, up to 64, T = 32
    and 128: about a tenth of a second)."""
    import numpy as np

    from shared.reference import reference_multi_head

    def timed(T: int) -> float:
        width = max(1, min(C // max(H, 1), 64))  # a head's D: its sums' length
        rng = np.random.default_rng(0)
        x = rng.standard_normal((T, width))
        w = [rng.standard_normal((width, width)) for _ in range(4)]
        start = time.perf_counter()
        reference_multi_head(x, *w, 1)
        return time.perf_counter() - start

    def pairs(T: int) -> float:
        return T * (T + 1) / 2

    timed(8)  # a first call pays for what is made once
    (t1, T1), (t2, T2) = ((timed(T), T) for T in (32, 128))
    # t = per_row * T + per_pair * pairs(T), solved from the two timings;
    # a busy machine's noise may leave one term below 0: the other takes all
    per_pair = (t2 * T1 - t1 * T2) / (pairs(T2) * T1 - pairs(T1) * T2)
    per_row = (t1 - per_pair * pairs(T1)) / T1
    if per_pair <= 0 or per_row < 0:
        per_pair, per_row = t2 / pairs(T2), 0.0
    return batch * H * (per_row * T + per_pair * pairs(T))


def refuse_unless_in_time(
    seconds: float, option: str, value: int, limit_s: float, limit_option: str = ""
) -> None:
    """Raise TooLargeError, one line, if the oracle's loops would take
    `seconds`, over `limit_s`: it names the size asked, the time and the
    option to change (and `limit_option`, where the limit is an option)."""
    if seconds <= limit_s:
        return
    limit = f"{limit_s:g} s" + (f" ({limit_option})" if limit_option else "")
    raise TooLargeError(
        f"{option} {value}: the float64 oracle's loops would take about "
        f"{duration_text(seconds)} on this machine, over the {limit} a run may "
        f"take: give a smaller {option}"
    )


def duration_text(seconds: float) -> str:
    """'3.2 hours', '12 minutes', '40 s'."""
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"
