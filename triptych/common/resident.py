"""This process's resident memory, read from Linux's /proc: the figures
`triptych bench --memory` and `triptych shard` measure peaks with; and the
garbage collections around measurements."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import re
from collections.abc import Iterator


def status_kib(field: str) -> int:
    """A field of /proc/self/status in KiB, e.g. VmRSS or VmHWM."""
    with open("/proc/self/status") as status:
        match = re.search(rf"^{field}:\s+(\d+) kB", status.read(), re.M)
    if match is None:
        raise RuntimeError(f"/proc/self/status has no {field}")
    return int(match.group(1))


def reset_peak() -> None:
    """Set the peak-RSS mark (VmHWM) to the current resident set (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def release_free_memory() -> None:
    """Collect, and give glibc's free heap pages back to the OS where we can."""
    gc.collect()
    # not glibc (no libc.so.6 or no malloc_trim): freed pages may stay resident
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


@contextlib.contextmanager
def heap_frozen() -> Iterator[None]:
    """Leave what the process holds now out of every garbage collection until
    the block ends (`gc.freeze`), so that a collection between two
    measurements (the bench's, between its points) looks only at what they
    made. A process that holds a lot (a test session, a notebook) took half a
    second for each full collection. A heap frozen before is left as is."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
