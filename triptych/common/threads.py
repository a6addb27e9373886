"""Threads: one count N for every framework, set before any of them runs.
A framework with a count of its own through its hooks (torch.set_num_threads,
impl_torch/backend.py); NumPy's BLAS (and OpenMP) through threadpoolctl. XLA
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

from shared import registry
from shared.blocks import schedulable_cores
from triptych.common.backends import BackendMissingError, hooks


def _pools_fixed() -> bool:
    """True if a framework imported here has already sized its thread pools
    for good (JAX once it has created its backends: too late for XLA_FLAGS);
    asked of each imported one's hooks (impl_<name>/backend.py)."""
    for framework in registry.frameworks():
        if not any(root in sys.modules for root in framework.arrays.roots):
            continue
        try:
            if hooks(framework.name).threads_fixed():
                return True
        except BackendMissingError:
            continue  # its backend does not import: it made no pool of ours
    return False


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
        if _pools_fixed():
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
        for framework in registry.frameworks():
            if framework.own_threads:  # torch: its OpenMP too
                settings[framework.name] = _set_threads(framework.name, n, restore)
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


def _set_threads(name: str, n: int, restore: contextlib.ExitStack) -> int | None:
    """Backend `name`'s own thread count set to n, restored on exit; the
    count now, or None where it is not installed."""
    try:
        backend = hooks(name)
    except BackendMissingError:
        return None
    before = backend.threads()
    backend.set_threads(n)
    restore.callback(backend.set_threads, before)
    return backend.threads()
