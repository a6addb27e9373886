"""The block of JAX's tuned attention (impl_jax/tuned.py), and the cores it
depends on: written once, for the backend and for the bench's traffic model
(triptych/bench/roofline.py), which must not import JAX. Measured on this
project's 2-core CPU (docs/bench.md, "The block sizes")."""

from __future__ import annotations

import os

ONLINE_BLOCK = 128
"""The block of queries and of keys on one core: the fastest of 128, 256 and
512 at T = 2048 and 4096; 512 computes a diagonal block four times larger than
needed and keeps blocks of scores that outgrow the L2 cache."""

ONLINE_BLOCK_THREADED = 512
"""The block on more than one core: XLA splits each product among its threads,
and a (128, 64) @ (64, 128) product per head is too small to split; 512 was
1.2x to 1.7x faster than 128 on two threads at T = 4096 and 8192, 1024 slower."""


def schedulable_cores() -> int:
    """The cores this process may run on (its affinity), or all of them."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def online_block_size(T: int, cores: int | None = None) -> int:
    """B: ONLINE_BLOCK on one core, ONLINE_BLOCK_THREADED on more, never more
    than T. `cores`: the threads XLA runs, one per core the process may use
    when it starts (None: `schedulable_cores()` now)."""
    cores = schedulable_cores() if cores is None else cores
    return max(1, min(ONLINE_BLOCK if cores == 1 else ONLINE_BLOCK_THREADED, T))
