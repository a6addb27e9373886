"""The benchmark's modes: one registry, name -> Mode, read by `triptych bench`
and `triptych bench --memory`.

A mode is one way of running multi-head causal self-attention on the shared
fixture: our hand-written `impl_*` functions eagerly or compiled, or a
framework's own fused kernel with the same projections (a reference line), or
one of our flash-attention kernels.

    base.py       Mode (an entry of the registry) and Runner (what it builds)
    runners.py    the runner factories, one per framework and way of running
    attention.py  impl_*.multi_head_attention and the fused references
    blockwise.py  impl_*.multi_head_blockwise_attention
    tuned.py      impl_*/tuned.py: our attention tuned for speed, off the
                  reading path
    kernels.py    the flash-attention kernels (impl_*/kernel.py) and the fused
                  CUDA references beside them, on a CUDA GPU only
    train.py      one training step of impl_*/train.py (`triptych bench --train`)

The registry is built below from those modules' MODES tuples, in that order:
`--modes`, the tables and the figures list the modes in the registry's order.
A plain `triptych bench` runs the modes of SETS["attention"], `--train` those
of SETS["train"]; `--modes` takes any.

Adding modes: write their build functions (Problem -> Runner, usually one
runner factory given the function to run) and a MODES tuple of `Mode`s in a
module of this package, and add that module to the line that builds MODES
below. A mode's `Runner.call()` runs one synchronized forward pass, so any
measurement builds the same runner and wraps `runner.first_call` /
`runner.call` with its own probe: the clock of `triptych bench`
(triptych.bench.timing), the resident-set probe of `--memory`
(triptych.bench.memory.probe).
"""

from __future__ import annotations

from triptych.bench.modes import attention, blockwise, kernels, train, tuned
from triptych.bench.modes.base import Mode


def register(mode: Mode) -> Mode:
    """Add a mode to the registry; a name can be registered once."""
    if mode.name in MODES:
        raise ValueError(f"mode {mode.name!r} is already registered")
    MODES[mode.name] = mode
    return mode


def unregister(name: str) -> None:
    """Remove a mode (for tests that register a mode of their own)."""
    del MODES[name]


MODES: dict[str, Mode] = {}
for _mode in (
    *attention.MODES,
    *blockwise.MODES,
    *tuned.MODES,
    *kernels.MODES,
    *train.MODES,
):
    register(_mode)

SETS: dict[str, tuple[str, ...]] = {
    "attention": tuple(
        m.name
        for m in (*attention.MODES, *blockwise.MODES, *tuned.MODES, *kernels.MODES)
    ),
    "train": tuple(m.name for m in train.MODES),
}
"""The modes a sweep runs when --modes is not given: plain and --train."""
