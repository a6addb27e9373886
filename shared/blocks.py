"""The block of JAX's tuned attention (impl_jax/tuned.py), its groups of heads
on threads, and the cores both depend on: written once, for the backend and
for the bench's traffic model (triptych/bench/roofline.py), which must not
import JAX. Measured on this project's 2-core CPU (docs/bench.md, "The block
sizes")."""

from __future__ import annotations

import os

ONLINE_BLOCK = 256
"""The block of queries and of keys on one core: the fastest of 128, 256 and
512 at T = 2048 to 8192 (1 to 5% ahead of 128; 512 computes a diagonal block
four times larger than needed and keeps blocks of scores that outgrow the L2
cache). Also each group's block when impl_jax/tuned.py's `on_threads` gives
every core a group of heads."""

ONLINE_BLOCK_THREADED = 512
"""The block of one program on more than one core: XLA splits each product
among its threads, and a (256, 64) @ (64, 256) product per head is too small
to split; 512 was 1.1x to 1.5x faster than 256 on two threads at T = 2048 to
8192, 1024 slower."""


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


def head_groups(
    T: int, n_heads: int, workers: int | None = None, cores: int | None = None
) -> tuple[int, int]:
    """(groups, B) of impl_jax/tuned.py's `on_threads`: the largest number of
    equal groups of heads, at most `workers`, and the block of a program that
    has its share of the cores. `cores`: XLA's threads (None:
    `schedulable_cores()` now); `workers` None: as many as the cores."""
    cores = schedulable_cores() if cores is None else cores
    workers = cores if workers is None else workers
    groups = max(g for g in range(1, min(workers, n_heads) + 1) if n_heads % g == 0)
    return groups, online_block_size(T, max(1, cores // groups))
