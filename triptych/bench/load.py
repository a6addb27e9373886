"""How busy the machine is with other work, before and during a sweep of
`triptych bench`: a timing taken while other processes hold the cores
measures the scheduler, not the mode.

Linux's /proc/stat counts the time every CPU spent busy (user, nice, system,
interrupts, and steal: time a hypervisor gave another machine); this process
and its children count their own (os.times, and /proc/PID/stat of the
children still running, e.g. torch.compile's workers). The difference over a
window is the CPU time of everything else: "others kept 1.4 of the 2 cores
busy". The load averages (os.getloadavg) are reported beside it. Where
/proc/stat is missing (not Linux) the share is None and only the load
averages are reported.

The machine counts as busy when others kept more than BUSY_SHARE of its cores
busy before the sweep or during it; bench then says so in its header, in
bench.md and on stderr.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from typing import Any

BUSY_SHARE = 0.2
"""Busy: other processes used more than this share of the machine's cores."""
BEFORE_S = 0.5
"""The window, in seconds, in which the load before the sweep is measured."""


@dataclass(frozen=True)
class CpuTimes:
    """A reading: wall clock, the CPU time of every core and of this process
    tree, in seconds (None where /proc/stat cannot be read)."""

    wall: float
    busy: float | None
    own: float


def read() -> CpuTimes:
    """The CPU times now."""
    return CpuTimes(time.perf_counter(), _busy_s(), _own_s())


def others_cores(start: CpuTimes, end: CpuTimes) -> float | None:
    """How many cores, on average, other processes kept busy between two
    readings (None without /proc/stat or without time between them)."""
    wall = end.wall - start.wall
    if start.busy is None or end.busy is None or wall <= 0:
        return None
    others = (end.busy - start.busy) - (end.own - start.own)
    return max(0.0, others / wall)


def before(seconds: float = BEFORE_S) -> dict[str, Any]:
    """The load in a short window now, while this process waits."""
    start = read()
    time.sleep(seconds)
    return summary(start, read())


def summary(start: CpuTimes, end: CpuTimes) -> dict[str, Any]:
    """What results.json records for a window: others' cores, the load
    averages at its end, the machine's cores and whether that is busy."""
    cores = os.cpu_count() or 1
    share = others_cores(start, end)
    loadavg = None
    with contextlib.suppress(OSError, AttributeError):
        loadavg = [round(x, 2) for x in os.getloadavg()]
    return {
        "others_busy_cores": None if share is None else round(share, 2),
        "cores": cores,
        "loadavg": loadavg,
        "busy": share is not None and share > BUSY_SHARE * cores,
    }


def describe(window: dict[str, Any]) -> str:
    """'other processes kept 1.4 of 2 cores busy (load average 3.1)'."""
    loadavg = window["loadavg"]
    average = "" if loadavg is None else f"load average {loadavg[0]:g}"
    if window["others_busy_cores"] is None:
        return f"not measured here (no /proc/stat){'; ' + average if average else ''}"
    return (
        f"other processes kept {window['others_busy_cores']:.2g} of "
        f"{window['cores']} cores busy" + (f" ({average})" if average else "")
    )


def warning(load: dict[str, Any], threads: int | None, clock: str) -> str | None:
    """One line when the machine was busy before or during the sweep, with
    what to rerun given the run's own --threads and --clock."""
    busy = [
        f"{when} the sweep {describe(load[when])}"
        for when in ("before", "during")
        if load.get(when) and load[when]["busy"]
    ]
    if not busy:
        return None
    if threads != 1:
        rerun = "rerun on a quiet machine, or with --threads 1 --clock cpu"
    elif clock != "cpu":
        rerun = "rerun on a quiet machine, or with --clock cpu"
    else:  # the CPU clock leaves out others' turns on the core, not the rest
        rerun = (
            "rerun on a quiet machine: the CPU clock leaves out the time others "
            "hold the core, not their share of its cache and memory bandwidth"
        )
    return (
        "the machine was busy: "
        + "; ".join(busy)
        + f". Timings are unreliable (rows marked noisy most of all): {rerun}"
    )


def _busy_s() -> float | None:
    """Seconds every CPU spent busy since boot, from /proc/stat's cpu line."""
    try:
        with open("/proc/stat") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    # user nice system idle iowait irq softirq steal (guest is inside user)
    ticks = [int(x) for x in fields[1:9]]
    busy = ticks[0] + ticks[1] + ticks[2] + ticks[5] + ticks[6] + ticks[7]
    return busy / os.sysconf("SC_CLK_TCK")


def _own_s() -> float:
    """CPU seconds of this process, its reaped children, and its children
    still running (their /proc/PID/stat)."""
    times = os.times()
    own = times.user + times.system + times.children_user + times.children_system
    return own + _running_children_s()


def _running_children_s() -> float:
    """CPU seconds of this process's descendants still running (Linux)."""
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return 0.0
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                text = stat.read()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()  # after "(comm)"
        parent[int(pid)] = int(fields[1])
        cpu[int(pid)] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    mine = {os.getpid()}
    grew = True
    while grew:
        found = {pid for pid, ppid in parent.items() if ppid in mine} - mine
        grew = bool(found)
        mine |= found
    return sum(cpu[pid] for pid in mine if pid != os.getpid())
