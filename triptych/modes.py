"""The benchmark's modes: one registry, name -> Mode, read by `triptych bench`.

A mode is one way of running multi-head causal self-attention on the shared
fixture: our hand-written `impl_*.multi_head_attention` eagerly or compiled, or
a framework's own fused kernel with the same projections (a reference line).

    numpy          impl_numpy.multi_head_attention (eager by nature)
    torch-eager    impl_torch.multi_head_attention
    torch-compile  torch.compile of the same function (fullgraph, static shapes)
    jax-eager      impl_jax.multi_head_attention, op by op, no jit
    jax-jit        jax.jit of the same function
    flax-jit       impl_jax.CausalSelfAttention (nnx.Module) under nnx.jit
    torch-sdpa     reference: F.scaled_dot_product_attention(is_causal=True), eager
    jax-dpa        reference: jax.nn.dot_product_attention(is_causal=True), jitted

How to extend (the seams other modules use):

- More modes. A module defines `build_*` functions and calls
  `register(Mode(...))` at import time; this file imports it once, at the
  bottom, so the modes are registered before the command line reads `MODES`.
  A build function is usually one runner factory (`numpy_runner`,
  `torch_eager_runner`, `torch_compile_runner`, `jax_jit_runner`) given the
  function to run. The blockwise modes arrive that way:
  `triptych/modes_blockwise.py` and one import line below.
- Other measurements. `Mode.build(problem)` returns a `Runner` whose `call()` runs
  one synchronized forward pass, so any measurement (e.g. peak memory, in
  `triptych/memory.py` for `triptych bench --memory`) builds the same runner and
  wraps `runner.first_call` / `runner.call` with its own probe. Nothing in a
  factory times anything.

A factory imports its framework inside the function (the command line must start
without torch or jax), moves the fixture to the problem's dtype and device,
builds whatever it compiles afresh (so its first call is a real trace and
compile, never a cache hit from an earlier T or run), and returns a Runner.
`call()` returns only when every output is computed: `jax.block_until_ready`
on every JAX output (weights included), `torch.cuda.synchronize()` on CUDA.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shared.fixture import Fixture

FRAMEWORKS = ("numpy", "torch", "jax")
KINDS = ("ours", "reference")


@dataclass(frozen=True)
class Problem:
    """What every mode runs at one point of the sweep.

    Attributes:
        fixture: the shared fixture, its arrays already cast to `dtype` (NumPy;
            bfloat16 through ml_dtypes). x is (B, T, C), w_* are (C, C).
        dtype: the dtype's name, e.g. "float32".
        device: "cpu" or "cuda" (NumPy always runs on the CPU).
    """

    fixture: Fixture
    dtype: str
    device: str

    @property
    def n_heads(self) -> int:
        """H."""
        return self.fixture.preset.n_heads

    @property
    def arrays(self) -> tuple[np.ndarray, ...]:
        """x, w_q, w_k, w_v, w_o, in the order multi_head_attention takes them."""
        return (self.fixture.x, *self.fixture.params.values())


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
    """

    call: Callable[[], Any]
    to_numpy: Callable[[Any], tuple[np.ndarray, np.ndarray | None]]
    first_call: Callable[[], Any] | None = None
    notes: Callable[[], dict[str, Any]] = field(default=dict)


@dataclass(frozen=True)
class Mode:
    """One entry of the registry.

    Attributes:
        name: what `--modes` takes, e.g. "jax-jit".
        framework: the backend it needs ("numpy", "torch" or "jax"), loaded with
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

    def __post_init__(self) -> None:
        if self.framework not in FRAMEWORKS:
            raise ValueError(
                f"mode {self.name!r}: unknown framework {self.framework!r}"
            )
        if self.kind not in KINDS:
            raise ValueError(f"mode {self.name!r}: kind must be one of {KINDS}")


MODES: dict[str, Mode] = {}


def register(mode: Mode) -> Mode:
    """Add a mode to the registry; a name can be registered once."""
    if mode.name in MODES:
        raise ValueError(f"mode {mode.name!r} is already registered")
    MODES[mode.name] = mode
    return mode


def unregister(name: str) -> None:
    """Remove a mode (for tests that register a mode of their own)."""
    del MODES[name]


# Runner factories -------------------------------------------------------------
# Each takes the problem and `forward(x, w_q, w_k, w_v, w_o, n_heads)`, a function
# of its framework that returns (out, weights or None), as
# impl_*.multi_head_attention does; the build_* functions below and in
# triptych/modes_blockwise.py pass theirs.


def _numpy_outputs(outputs):
    """(out, weights or None) of NumPy or JAX arrays, as NumPy arrays."""
    out, weights = outputs
    return np.asarray(out), None if weights is None else np.asarray(weights)


# NumPy ------------------------------------------------------------------------


def numpy_runner(problem: Problem, forward: Callable) -> Runner:
    """A Runner of a NumPy `forward`: eager, synchronous."""
    import impl_numpy

    x, w_q, w_k, w_v, w_o = (impl_numpy.from_numpy(a) for a in problem.arrays)
    H = problem.n_heads

    def call():
        return forward(x, w_q, w_k, w_v, w_o, H)

    return Runner(call, _numpy_outputs)


def build_numpy(problem: Problem) -> Runner:
    """impl_numpy.multi_head_attention: eager, synchronous."""
    import impl_numpy

    return numpy_runner(problem, impl_numpy.multi_head_attention)


# PyTorch ----------------------------------------------------------------------


def _torch_arrays(problem):
    """The fixture as torch tensors on the problem's device, and a sync function."""
    import torch

    import impl_torch

    device = torch.device(problem.device)
    tensors = [
        impl_torch.from_numpy(a, problem.dtype, device=device) for a in problem.arrays
    ]
    if device.type == "cuda":
        torch.cuda.synchronize(device)

        def sync():
            torch.cuda.synchronize(device)

    else:

        def sync():  # CPU kernels return when done
            pass

    return tensors, sync


def _torch_outputs(outputs):
    import impl_torch

    out, weights = outputs
    return impl_torch.to_numpy(out), (
        None if weights is None else impl_torch.to_numpy(weights)
    )


def torch_eager_runner(problem: Problem, forward: Callable) -> Runner:
    """A Runner of a torch `forward`, op by op, under no_grad."""
    import torch

    (x, w_q, w_k, w_v, w_o), sync = _torch_arrays(problem)
    H = problem.n_heads

    def call():
        with torch.no_grad():
            outputs = forward(x, w_q, w_k, w_v, w_o, H)
        sync()
        return outputs

    return Runner(call, _torch_outputs)


def torch_compile_runner(problem: Problem, forward: Callable) -> Runner:
    """A Runner of torch.compile(forward); notes inductor's fusion."""
    (x, w_q, w_k, w_v, w_o), sync = _torch_arrays(problem)
    args = (x, w_q, w_k, w_v, w_o, problem.n_heads)
    return compiled_torch_runner(forward, args, sync)


def compiled_torch_runner(function, args, sync) -> Runner:
    """A Runner of torch.compile(function)(*args) that notes inductor's fusion.

    Dynamo's in-memory caches are reset and every compile cache is off for the
    first call, so it is a real compile for this T. `dynamic=False`: one
    static-shape graph per T, as jax.jit makes. Inductor's pattern matcher adds
    one to counters["inductor"]["fuse_attention"] for each attention pattern it
    replaces with scaled_dot_product_attention; the note is that count's rise.
    """
    import torch
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    compiled = torch.compile(function, fullgraph=True, dynamic=False)
    fused = {"before": counters["inductor"]["fuse_attention"], "after": None}

    def call():
        with torch.no_grad():
            outputs = compiled(*args)
        sync()
        return outputs

    def first_call():
        with warnings.catch_warnings():
            # "dynamo_pgo force disabled by ...force_disable_caches": that is the point
            warnings.filterwarnings("ignore", "dynamo_pgo force disabled")
            with torch.compiler.config.patch(force_disable_caches=True):
                outputs = call()
        fused["after"] = counters["inductor"]["fuse_attention"]
        return outputs

    def notes():
        return {"fused_attention": fused["after"] > fused["before"]}

    return Runner(call, _torch_outputs, first_call=first_call, notes=notes)


def build_torch_eager(problem: Problem) -> Runner:
    """impl_torch.multi_head_attention, op by op."""
    import impl_torch

    return torch_eager_runner(problem, impl_torch.multi_head_attention)


def build_torch_compile(problem: Problem) -> Runner:
    """torch.compile of impl_torch.multi_head_attention; reports inductor's fusion."""
    import impl_torch

    return torch_compile_runner(problem, impl_torch.multi_head_attention)


def build_torch_sdpa(problem: Problem) -> Runner:
    """Our projections around F.scaled_dot_product_attention(is_causal=True)."""
    import torch.nn.functional as F

    def forward(x, w_q, w_k, w_v, w_o, H):
        B, T, C = x.shape
        q = (x @ w_q).view(B, T, H, C // H).transpose(1, 2)  # (B, H, T, D)
        k = (x @ w_k).view(B, T, H, C // H).transpose(1, 2)  # (B, H, T, D)
        v = (x @ w_v).view(B, T, H, C // H).transpose(1, 2)  # (B, H, T, D)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out = out.transpose(1, 2).reshape(B, T, C)  # (B, H, T, D) -> (B, T, C)
        return out @ w_o, None  # (B, T, C) @ (C, C) -> (B, T, C)

    return torch_eager_runner(problem, forward)


# JAX and flax -----------------------------------------------------------------


def jax_device(device: str):
    """The first JAX device of a kind: "cpu" or "cuda" (JAX's "gpu")."""
    import jax

    return jax.devices("gpu" if device == "cuda" else "cpu")[0]


def _jax_arrays(problem):
    """The fixture as JAX arrays committed to the problem's device."""
    import jax

    import impl_jax

    device = jax_device(problem.device)
    arrays = [
        jax.device_put(impl_jax.from_numpy(a, problem.dtype), device)
        for a in problem.arrays
    ]
    return jax.block_until_ready(arrays), device


def jax_jit_runner(problem: Problem, forward: Callable) -> Runner:
    """A Runner of jax.jit of a JAX `forward`, traced afresh for this problem."""
    import jax

    (x, w_q, w_k, w_v, w_o), _ = _jax_arrays(problem)
    H = problem.n_heads

    # A new function object per build: jax.jit caches traces and executables by
    # function, so jitting `forward` itself (or reusing impl_jax's *_jit) would
    # let a second run in the same process skip the compile it is meant to time.
    def traced(x, w_q, w_k, w_v, w_o):
        return forward(x, w_q, w_k, w_v, w_o, H)

    compiled = jax.jit(traced)

    def call():
        return jax.block_until_ready(compiled(x, w_q, w_k, w_v, w_o))

    return Runner(call, _numpy_outputs)


def build_jax_eager(problem: Problem) -> Runner:
    """impl_jax.multi_head_attention, op by op (each op dispatched on its own)."""
    import jax

    import impl_jax

    (x, w_q, w_k, w_v, w_o), _ = _jax_arrays(problem)
    H = problem.n_heads

    def call():
        outputs = impl_jax.multi_head_attention(x, w_q, w_k, w_v, w_o, H)
        return jax.block_until_ready(outputs)

    return Runner(call, _numpy_outputs)


def build_jax_jit(problem: Problem) -> Runner:
    """jax.jit of impl_jax.multi_head_attention, traced afresh for this problem."""
    import impl_jax

    return jax_jit_runner(problem, impl_jax.multi_head_attention)


def build_flax_jit(problem: Problem) -> Runner:
    """impl_jax.CausalSelfAttention (nnx.Module) under nnx.jit."""
    import jax
    from flax import nnx

    import impl_jax

    (x, *_), device = _jax_arrays(problem)
    with jax.default_device(device):
        module = impl_jax.CausalSelfAttention.from_weights(
            *problem.fixture.params.values(), problem.n_heads
        )
    jax.block_until_ready(nnx.state(module))

    @nnx.jit
    def forward(module, x):  # a new function per build, as in jax-jit
        return module(x)

    def call():
        return jax.block_until_ready(forward(module, x))

    return Runner(call, _numpy_outputs)


def build_jax_dpa(problem: Problem) -> Runner:
    """Our projections around jax.nn.dot_product_attention(is_causal=True), jitted."""
    import jax

    def forward(x, w_q, w_k, w_v, w_o, H):
        B, T, C = x.shape
        q = (x @ w_q).reshape(B, T, H, C // H)  # (B, T, C) -> (B, T, H, D)
        k = (x @ w_k).reshape(B, T, H, C // H)  # (B, T, C) -> (B, T, H, D)
        v = (x @ w_v).reshape(B, T, H, C // H)  # (B, T, C) -> (B, T, H, D)
        out = jax.nn.dot_product_attention(q, k, v, is_causal=True)  # (B, T, H, D)
        out = out.reshape(B, T, C)  # (B, T, H, D) -> (B, T, C)
        return out @ w_o, None  # (B, T, C) @ (C, C) -> (B, T, C)

    return jax_jit_runner(problem, forward)


register(
    Mode(
        name="numpy",
        framework="numpy",
        kind="ours",
        compiled=False,
        eager_twin=None,
        returns_weights=True,
        linear_memory=False,
        build=build_numpy,
        summary="impl_numpy.multi_head_attention",
    )
)
register(
    Mode(
        name="torch-eager",
        framework="torch",
        kind="ours",
        compiled=False,
        eager_twin=None,
        returns_weights=True,
        linear_memory=False,
        build=build_torch_eager,
        summary="impl_torch.multi_head_attention, op by op",
    )
)
register(
    Mode(
        name="torch-compile",
        framework="torch",
        kind="ours",
        compiled=True,
        eager_twin="torch-eager",
        returns_weights=True,
        linear_memory=False,
        build=build_torch_compile,
        summary="torch.compile(impl_torch.multi_head_attention), static shapes",
    )
)
register(
    Mode(
        name="jax-eager",
        framework="jax",
        kind="ours",
        compiled=False,
        eager_twin=None,
        returns_weights=True,
        linear_memory=False,
        build=build_jax_eager,
        summary="impl_jax.multi_head_attention, op by op, no jit",
    )
)
register(
    Mode(
        name="jax-jit",
        framework="jax",
        kind="ours",
        compiled=True,
        eager_twin="jax-eager",
        returns_weights=True,
        linear_memory=False,
        build=build_jax_jit,
        summary="jax.jit(impl_jax.multi_head_attention)",
    )
)
register(
    Mode(
        name="flax-jit",
        framework="jax",
        kind="ours",
        compiled=True,
        eager_twin="jax-eager",
        returns_weights=True,
        linear_memory=False,
        build=build_flax_jit,
        summary="impl_jax.CausalSelfAttention (nnx.Module) under nnx.jit",
    )
)
register(
    Mode(
        name="torch-sdpa",
        framework="torch",
        kind="reference",
        compiled=False,
        eager_twin=None,
        returns_weights=False,
        linear_memory=True,  # PyTorch's CPU flash kernel works in blocks
        build=build_torch_sdpa,
        summary="F.scaled_dot_product_attention(is_causal=True), eager",
    )
)
register(
    Mode(
        name="jax-dpa",
        framework="jax",
        kind="reference",
        compiled=True,
        eager_twin=None,
        returns_weights=False,
        linear_memory=False,
        build=build_jax_dpa,
        summary="jax.jit of jax.nn.dot_product_attention(is_causal=True)",
    )
)

# Modes defined in other modules register themselves when imported: one import
# line each below (`from triptych import modes_blockwise` with noqa E402, F401).
from triptych import modes_blockwise  # noqa: E402, F401
