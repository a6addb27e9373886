"""What a `triptych bench` time sweep is asked for: its settings (TimeConfig)
from the arguments and the full or --quick defaults, what --quick leaves out,
and the command line that repeats the run."""

from __future__ import annotations

import argparse
import dataclasses
import shlex
from typing import Any

from shared import registry
from triptych.bench.config import (
    SCALING_MODES,
    TimeConfig,
    defaults_for,
    resolve_sweep,
)
from triptych.bench.modes import MODES, SETS
from triptych.bench.problem import SEED
from triptych.common.errors import CommandError


def resolve_config(args: argparse.Namespace) -> TimeConfig:
    """The time sweep `args` ask for; what they leave, from the full or the
    --quick defaults.

    Raises:
        CommandError: see `triptych.bench.config.resolve_sweep`.
    """
    defaults = defaults_for(args)
    modes = SETS["train" if args.train else "attention"]
    scaling = bool(getattr(args, "scaling", False))
    if scaling:
        if args.train:
            raise CommandError("--scaling times attention's forward, not training")
        modes = SCALING_MODES
        square = [m for m in (args.modes or ()) if not MODES[m].linear_memory]
        if square:
            raise CommandError(
                f"--scaling times the modes whose memory grows as T; "
                f"{', '.join(square)} hold(s) (B, H, T, T) arrays: drop it"
            )
    left_out: tuple[str, ...] = ()
    if args.quick and not args.modes:
        left_out = tuple(name for name in modes if slow_to_build(MODES[name]))
        modes = tuple(name for name in modes if name not in left_out)
    common = resolve_sweep(args, T=defaults["T"], modes=modes)
    return TimeConfig(
        **common,
        repeats=args.repeats or defaults["repeats"],
        warmup=defaults["warmup"] if args.warmup is None else args.warmup,
        device=args.device,
        gemm_size=args.gemm_size or defaults["gemm_size"],
        min_sample_s=defaults["min_sample_s"],
        train=bool(args.train),
        left_out=left_out,
        breakdown=_breakdown_wanted(args, scaling),
        clock=_clock(args, common["threads"]),
        bandwidth_mib=defaults["bandwidth_mib"],
        scaling=scaling,
    )


def _clock(args: argparse.Namespace, threads: int) -> str:
    """--clock; cpu only with one thread (the CPU time of N threads adds up).

    Raises:
        CommandError: --clock cpu with more than one thread.
    """
    name = getattr(args, "clock", None) or "wall"
    if name == "cpu" and threads != 1:
        raise CommandError(
            "--clock cpu needs --threads 1: with more threads the process's CPU "
            "time adds theirs up"
        )
    return name


def _breakdown_wanted(args: argparse.Namespace, scaling: bool) -> bool:
    """--breakdown / --no-breakdown where given; else on for a full attention
    sweep, off for --quick, --train and --scaling (it profiles each point
    again)."""
    given = getattr(args, "breakdown", None)
    if given is not None:
        return bool(given)
    return not (args.quick or args.train or scaling)


def slow_to_build(mode) -> bool:
    """True for a mode whose first call runs a slow compile step (the
    registry's: torch.compile, inductor: 10 to 30 s per T on a CPU), which
    --quick leaves out unless --modes names it."""
    compiler = registry.get(mode.framework).compiler
    return mode.compiled and mode.compiler is None and bool(compiler and compiler.slow)


def left_out_line(config: TimeConfig) -> str | None:
    """What --quick left out, why, and how to have it."""
    if not config.left_out:
        return None
    slow = dict.fromkeys(
        registry.get(MODES[name].framework).compiler.name for name in config.left_out
    )
    return (
        f"--quick leaves out {', '.join(config.left_out)}: {' and '.join(slow)} "
        "takes 10 to 30 s per T; add them with --modes "
        + ",".join((*config.modes, *config.left_out))
    )


def command_line(config: TimeConfig) -> str:
    """The command that repeats this run, every setting spelled out."""
    parts = [
        "triptych", "bench",
        "--T", ",".join(map(str, config.T)),
        "--d-model", str(config.d_model),
        "--n-heads", str(config.n_heads),
        "--batch", str(config.batch),
        "--dtype", config.dtype,
        "--modes", ",".join(config.modes),
        "--repeats", str(config.repeats),
        "--warmup", str(config.warmup),
        "--threads", str(config.threads),
        "--device", config.device,
        "--gemm-size", str(config.gemm_size),
    ]  # fmt: skip
    parts += ["--clock", config.clock]
    flags = ["--breakdown" if config.breakdown else "--no-breakdown"]
    flags += ["--quick"] * config.quick + ["--scaling"] * config.scaling
    flags += ["--train"] * config.train
    return shlex.join(parts + flags)


def config_dict(config: TimeConfig) -> dict[str, Any]:
    """The "config" of results.json: the settings that repeat the run."""
    d = dataclasses.asdict(config)
    d["T"] = list(config.T)
    d["modes"] = list(config.modes)
    d["d_head"] = config.d_model // config.n_heads
    d["seed"] = SEED
    d["left_out"] = list(config.left_out)
    for key in ("quiet", "output_dir"):
        d.pop(key)
    return d
