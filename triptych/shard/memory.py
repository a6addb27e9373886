"""What a device held: the arrays it made (their shapes, the largest one) and,
in a process of its own, the peak of its resident memory during one call.

Used by every child of `triptych shard` (`torch_rank`, `jax_child`) and by
the NumPy run in the parent; imports NumPy only."""

from __future__ import annotations

import contextlib
import ctypes
import re
from collections.abc import Iterable
from typing import Any

import numpy as np

from triptych.common.resident import release_free_memory, reset_peak, status_kib

HLO_ITEMSIZE = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2,
                "bf16": 2, "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8,
                "f64": 8}  # fmt: skip
_HLO_SHAPE = re.compile(r"\b(" + "|".join(HLO_ITEMSIZE) + r")\[([\d,]*)\]")


def arrays_summary(arrays: Iterable[tuple[tuple[int, ...], int]]) -> dict[str, Any]:
    """From (shape, itemsize) pairs: the distinct shapes, and the largest array."""
    arrays = set(arrays)
    shape, itemsize = max(arrays, key=lambda a: (int(np.prod(a[0])) * a[1], a[0]))
    return dict(
        shapes=sorted(list(s) for s in {s for s, _ in arrays}),
        largest_array_shape=list(shape),
        largest_array_bytes=int(np.prod(shape)) * itemsize,
    )


def hlo_arrays(hlo_text: str) -> list[tuple[tuple[int, ...], int]]:
    """(shape, itemsize) of every array in a compiled XLA program's text."""
    return [
        (tuple(int(d) for d in dims.split(",") if d), HLO_ITEMSIZE[kind])
        for kind, dims in _HLO_SHAPE.findall(hlo_text)
    ]


class Recorded(np.ndarray):
    """A NumPy array that records the shape of every array made from it, by
    an operator or a NumPy function (`RECORDED`): what the NumPy ring made."""

    def __array_finalize__(self, obj):
        RECORDED.append((self.shape, self.dtype.itemsize))

    def __array_function__(self, func, types, args, kwargs):
        result = super().__array_function__(func, types, args, kwargs)
        if isinstance(result, np.ndarray) and not isinstance(result, Recorded):
            result = result.view(Recorded)  # np.concatenate, np.where, ...
        return result


RECORDED: list[tuple[tuple[int, ...], int]] = []


def peak_of(call) -> tuple[Any, int]:
    """call(), and the peak of this process's resident set during it above the
    resident set just before it, in bytes (Linux: VmHWM reset through
    /proc/self/clear_refs), after freed heap pages are given back."""
    release_free_memory()
    reset_peak()
    baseline = status_kib("VmRSS")
    result = call()
    return result, (status_kib("VmHWM") - baseline) * 1024


def die_with_parent() -> None:
    """Ask Linux to kill this process when the process that started it ends
    (PR_SET_PDEATHSIG), so that no child outlives `triptych shard`."""
    import signal

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
