"""What a mode is: a `Mode` (one entry of the registry, `triptych.bench.modes`)
builds a `Runner` (one ready-to-call forward pass) for a `Problem`
(`triptych.bench.problem`)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shared import registry
from triptych.bench.problem import Problem

KINDS = ("ours", "reference")


@dataclass
class Runner:
    """A ready-to-call forward pass on one problem.

    Attributes:
        call: one forward pass that returns its outputs once they are computed.
        to_numpy: outputs of `call` -> (out (B, T, C), weights (B, H, T, T) or
            None for the fused kernels, which do not return them), in NumPy.
        first_call: the call to use the first time (e.g. with compile caches
            off); None means `call`.
        notes: after the first call, what the mode learned about itself, as
            JSON-ready values (e.g. whether inductor fused the attention).
        compiled: for a jax.jit mode, lowers and compiles its function again
            (the same program) and returns jax's Compiled, for XLA's cost
            analysis (triptych.bench.breakdown); None for the others.
    """

    call: Callable[[], Any]
    to_numpy: Callable[[Any], tuple[np.ndarray, np.ndarray | None]]
    first_call: Callable[[], Any] | None = None
    notes: Callable[[], dict[str, Any]] = field(default=dict)
    compiled: Callable[[], Any] | None = None


@dataclass(frozen=True)
class Mode:
    """One entry of the registry.

    Attributes:
        name: what `--modes` takes, e.g. "jax-jit".
        framework: the backend it needs (a name of shared.registry), loaded with
            `triptych.common.backends.load_backend`; if missing, the mode is skipped.
        kind: "ours" (the hand-written functions) or "reference" (a
            framework's own fused kernel, drawn dashed).
        compiled: True when the first call traces and compiles.
        eager_twin: for a compiled mode, the eager mode its speedup is over.
        returns_weights: True when it returns the (B, H, T, T) attention
            weights (checked against NumPy's too); the fused kernels and the
            blockwise modes return None for them.
        linear_memory: True when its memory grows as T, not T^2: it never
            holds a (B, H, T, T) array (`triptych bench --memory` runs it where
            such an array would not fit).
        build: Problem -> Runner.
        summary: one line for the help text and bench.md.
        work: what one call does, a key of triptych.bench.timing.WORK:
            "attention" (a forward pass) or "training step".
        reference: Problem -> what the first call must match, as
            `Runner.to_numpy` gives it; None: NumPy's attention
            (triptych.bench.problem.reference_outputs).
        baseline: the mode its "vs numpy" speedup is over.
        cuda_only: True when it runs compiled on a CUDA GPU and nowhere else
            (a kernel, whose CPU interpreter would time the interpreter).
        requires: modules it needs beyond its framework, e.g. ("triton",).
        compiler: what compiles it where that is not its framework's compile
            step (shared.registry), e.g. "nnx.jit".
    """

    name: str
    framework: str
    kind: str
    compiled: bool
    eager_twin: str | None
    returns_weights: bool
    linear_memory: bool
    build: Callable[[Problem], Runner]
    summary: str
    work: str = "attention"
    reference: Callable[[Problem], Any] | None = None
    baseline: str = "numpy"
    cuda_only: bool = False
    requires: tuple[str, ...] = ()
    compiler: str | None = None

    def unavailable(self, device: str) -> str | None:
        """Why it cannot run on `device` ("cpu" or "cuda"), its framework
        aside; None when it can."""
        for module in self.requires:
            if importlib.util.find_spec(module) is None:
                return (
                    f"needs {module}, which is not installed: "
                    + registry.install_command("kernels")
                )
        if self.cuda_only and device != "cuda":
            return f"runs on a CUDA GPU only; this run is on {device}"
        return None

    def __post_init__(self) -> None:
        if self.framework not in registry.names():
            raise ValueError(
                f"mode {self.name!r}: unknown framework {self.framework!r}"
            )
        if self.kind not in KINDS:
            raise ValueError(f"mode {self.name!r}: kind must be one of {KINDS}")
