"""The settings of `triptych bench`: its defaults, full and --quick, and one
config type per idea, each field declared once.

    SweepConfig    what both sweeps take: the sizes, the dtype, the modes, the
                   threads, where the files go and how much to print
    TimeConfig     a SweepConfig and how each point is timed (`triptych bench`,
                   and `--train`, triptych.bench.sweep)
    MemoryConfig   a SweepConfig and the limits of `triptych bench --memory`
                   (triptych.bench.memory)

Each sweep reads its config from the parsed arguments with its own
`resolve_config`, through `resolve_sweep` here, which fills and checks what
both share.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from triptych.common.errors import CommandError
from triptych.common.threads import schedulable_cores

FULL = dict(
    T=(128, 256, 512, 1024, 2048),
    d_model=512,
    n_heads=8,
    batch=1,
    repeats=10,
    warmup=2,
    gemm_size=1024,
    min_sample_s=0.01,
    bandwidth_mib=256,
)
QUICK = dict(
    T=(8, 16),
    d_model=32,
    n_heads=4,
    batch=1,
    repeats=3,
    warmup=1,
    gemm_size=128,
    min_sample_s=0.001,
    bandwidth_mib=16,
)
TRAIN = dict(FULL, T=(32, 64, 128, 256), d_model=64, n_heads=4, batch=32)
"""--train: the model of `triptych train` (C 64, H 4, batch 32) at growing T."""
TRAIN_QUICK = dict(QUICK, batch=4)
"""--train --quick."""
SCALING = dict(FULL, T=(1024, 2048, 4096, 8192, 16384, 32768), repeats=3, warmup=0)
"""--scaling: the modes whose memory grows as T, up to T = 32768, each call
checked against NumPy's blockwise attention (the naive one would need 32 GiB
for its weights there); 3 samples, no warm-up (a call at T = 32768 takes
seconds)."""
SCALING_MODES = (
    "numpy-blockwise",
    "torch-blockwise",
    "jax-blockwise-jit",
    "numpy-tuned",
    "torch-tuned",
    "jax-tuned-jit",
    "torch-sdpa",
)


def defaults_for(args: argparse.Namespace) -> dict[str, Any]:
    """The defaults of the sweep `args` ask for: FULL, QUICK, TRAIN or
    TRAIN_QUICK."""
    if getattr(args, "train", False):
        return TRAIN_QUICK if args.quick else TRAIN
    if getattr(args, "scaling", False):
        return dict(QUICK, T=(64, 128, 256)) if args.quick else SCALING
    return QUICK if args.quick else FULL


@dataclasses.dataclass(frozen=True)
class SweepConfig:
    """What both sweeps of `triptych bench` take: every mode at every T."""

    T: tuple[int, ...]
    d_model: int
    n_heads: int
    batch: int
    dtype: str
    modes: tuple[str, ...]
    threads: int
    output_dir: str
    quick: bool
    quiet: bool


@dataclasses.dataclass(frozen=True)
class TimeConfig(SweepConfig):
    """`triptych bench`: the sweep, and how each of its points is timed."""

    repeats: int
    warmup: int
    device: str
    gemm_size: int
    min_sample_s: float
    train: bool
    left_out: tuple[str, ...] = ()
    """The default modes --quick leaves out (their first call is slow)."""
    breakdown: bool = False
    """Profile each mode after timing it: where the time goes
    (triptych.bench.breakdown)."""
    bandwidth_mib: int = 256
    """The array of the memory-bandwidth copy (triptych.bench.roofline)."""
    scaling: bool = False
    """--scaling: time against T for the linear-memory modes, exponents fitted."""
    clock: str = "wall"
    """--clock: "wall" or "cpu" (triptych.bench.timing.CLOCKS)."""


@dataclasses.dataclass(frozen=True)
class MemoryConfig(SweepConfig):
    """`triptych bench --memory`: the sweep, and the limits of its points."""

    memory_limit_gib: float
    timeout_s: int


def refuse_what_cannot_fit(
    args: argparse.Namespace, found: dict[str, Any], defaults: dict[str, Any]
) -> None:
    """Sizes no memory can hold at the largest T: one line
    (`triptych.common.limits`). Every point holds x and the weights; the time
    sweep checks each point against NumPy's naive attention, which holds
    (B, H, T, T) weights (--scaling: against its blockwise one, which does
    not; the memory sweep skips such points itself, `--memory-limit-gib`);
    the GEMM peak multiplies two (n, n) float32 matrices into a third."""
    from shared.dtypes import np_dtype
    from triptych.common import limits

    B, T, C, H = found["batch"], max(found["T"]), found["d_model"], found["n_heads"]
    size = np_dtype(found["dtype"]).itemsize
    arrays = [
        limits.Array("x", (B, T, C), size, ("--T", "--batch")),
        limits.Array("the four (C, C) weights", (4, C, C), size, ("--d-model",)),
    ]
    if not (getattr(args, "memory", False) or getattr(args, "scaling", False)):
        what = "the (B, H, T, T) weights"
        sizes = ("--T", "--batch", "--n-heads")
        arrays.append(limits.Array(what, (B, H, T, T), size, sizes))
    gemm = getattr(args, "gemm_size", None) or defaults.get("gemm_size", 0)
    arrays.append(limits.Array("the GEMM's three (n, n)", (3, gemm, gemm), 4,
                               ("--gemm-size",)))  # fmt: skip
    limits.refuse_unless_fits(
        arrays,
        {"--T": T, "--batch": B, "--d-model": C, "--n-heads": H, "--gemm-size": gemm},
        {
            "--T": max(defaults["T"]),
            "--batch": defaults["batch"],
            "--d-model": defaults["d_model"],
            "--n-heads": defaults["n_heads"],
            "--gemm-size": defaults.get("gemm_size"),
        },
    )


def resolve_sweep(
    args: argparse.Namespace, *, T: tuple[int, ...], modes: tuple[str, ...]
) -> dict[str, Any]:
    """The fields of a SweepConfig, from `args` where given, else `T`, `modes`
    and the full or --quick sizes.

    Raises:
        CommandError: n_heads does not divide d_model, or --threads asks for
            more cores than this process may use.
    """
    defaults = defaults_for(args)
    d_model = args.d_model or defaults["d_model"]
    n_heads = args.n_heads or defaults["n_heads"]
    if d_model % n_heads:
        raise CommandError(f"--n-heads {n_heads} does not divide --d-model {d_model}")
    cores = schedulable_cores()
    threads = args.threads or cores
    if threads > cores:
        raise CommandError(
            f"--threads {threads} asks for more than the {cores} cores this "
            "process may use"
        )
    found = dict(
        T=args.T or T,
        d_model=d_model,
        n_heads=n_heads,
        batch=args.batch or defaults["batch"],
        dtype=args.dtype,
        modes=args.modes or modes,
    )
    refuse_what_cannot_fit(args, found, defaults)
    return dict(
        **found,
        threads=threads,
        output_dir=args.output_dir,
        quick=bool(args.quick),
        quiet=bool(args.quiet),
    )
