"""How sharded attention cuts a sequence across devices (docs/sharding.md).

Every backend's `sharded.py` lays the rows out the same way: the sequence,
padded at its end to a multiple of 2N, is cut into 2N chunks of c positions,
and device r holds chunk r and chunk 2N - 1 - r (the zigzag layout of context
parallelism in Llama 3's training). With causal attention, chunk r has few
keys before it and chunk 2N - 1 - r many, so every device does the same work
at every step of the ring. NumPy only: the positions are plain integers.
"""

from __future__ import annotations

import numpy as np

STRATEGIES = ("heads", "sequence")
"""heads: each device computes H / N heads over every row (tensor parallel);
sequence: each device keeps its rows and the keys and values travel round a
ring of devices (context parallel, ring attention)."""


def chunk_length(T: int, n_devices: int) -> int:
    """c = ceil(T / 2N), the positions in each of the 2N chunks."""
    return -(-T // (2 * n_devices))


def zigzag_positions(T: int, n_devices: int) -> np.ndarray:
    """(N, 2c) int64: the positions device r holds, chunk r then chunk 2N - 1 - r.

    Positions T and above are the padding that makes 2N chunks of c; they
    come last in the sequence, so causality already hides them from every
    real query.
    """
    N = n_devices
    chunks = np.arange(2 * N * chunk_length(T, N)).reshape(2 * N, -1)  # (2N, c)
    return np.concatenate([chunks[:N], chunks[::-1][:N]], axis=-1)  # (N, 2c)


def inverse_positions(T: int, n_devices: int) -> np.ndarray:
    """(T,) int64: where position t sits once the devices' rows are put end to end."""
    return np.argsort(zigzag_positions(T, n_devices).ravel())[:T]
