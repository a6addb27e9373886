"""Threads: one count N for every framework, set before any of them runs.
torch.set_num_threads(N); NumPy's BLAS (and OpenMP) through threadpoolctl. XLA
has no setting for N threads: it sizes its pool from the cores the process may
use, so for N below those the process is pinned to N cores, and N = 1 also sets
XLA_FLAGS=--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1.
Both only work before JAX starts its backend; if it already has, what is set
says so. `triptych bench` and `triptych train` run inside `thread_limits`.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from shared.blocks import schedulable_cores


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
                f"{n} (process pinned to CPUs {','.join(map(str, sorted(pinned)))}; "
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
