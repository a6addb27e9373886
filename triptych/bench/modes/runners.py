"""The runner factories: how a mode's build function turns a function of its
framework into a `Runner`. Each takes the problem and `forward(x, w_q, w_k,
w_v, w_o, n_heads)`, a function of its framework that returns (out, weights or
None), as impl_*.multi_head_attention does; the build functions of
`triptych.bench.modes.attention` and `.blockwise` pass theirs.

A factory imports its framework inside the function (the command line must
start without torch or jax), moves the fixture to the problem's dtype and
device, builds whatever it compiles afresh (so its first call is a real trace
and compile, never a cache hit from an earlier T or run), and returns a Runner.
`call()` returns only when every output is computed: `jax.block_until_ready`
on every JAX output (weights included), `torch.cuda.synchronize()` on CUDA.
Nothing in a factory times anything.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from triptych.bench.modes.base import Runner
from triptych.bench.problem import Problem
from triptych.common import backends


def numpy_outputs(outputs):
    """(out, weights or None) of NumPy or JAX arrays, as NumPy arrays."""
    out, weights = outputs
    return np.asarray(out), None if weights is None else np.asarray(weights)


def out_only(attention):
    """forward(x, w_q, w_k, w_v, w_o, H) -> (out, None): a function that returns
    (out, lse) with its lse dropped, so that only `out` is checked (blockwise
    and flash attention have no weights)."""

    def forward(x, w_q, w_k, w_v, w_o, H):
        out, _ = attention(x, w_q, w_k, w_v, w_o, H)
        return out, None

    return forward


# NumPy ------------------------------------------------------------------------


def numpy_runner(problem: Problem, forward: Callable) -> Runner:
    """A Runner of a NumPy `forward`: eager, synchronous."""
    import impl_numpy

    x, w_q, w_k, w_v, w_o = (impl_numpy.from_numpy(a) for a in problem.arrays)
    H = problem.n_heads

    def call():
        return forward(x, w_q, w_k, w_v, w_o, H)

    return Runner(call, numpy_outputs)


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
        outputs = backends.hooks("torch").uncached(call)  # compile caches off
        fused["after"] = counters["inductor"]["fuse_attention"]
        return outputs

    def notes():
        return {"fused_attention": fused["after"] > fused["before"]}

    return Runner(call, _torch_outputs, first_call=first_call, notes=notes)


# JAX and flax -----------------------------------------------------------------


def jax_device(device: str):
    """The first JAX device of a kind: "cpu" or "cuda" (JAX's "gpu")."""
    import jax

    return jax.devices("gpu" if device == "cuda" else "cpu")[0]


def jax_arrays(problem):
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

    (x, w_q, w_k, w_v, w_o), _ = jax_arrays(problem)
    H = problem.n_heads

    # A new function object per build: jax.jit caches traces and executables by
    # function, so jitting `forward` itself (or reusing impl_jax's *_jit) would
    # let a second run in the same process skip the compile it is meant to time.
    def traced(x, w_q, w_k, w_v, w_o):
        return forward(x, w_q, w_k, w_v, w_o, H)

    compiled = jax.jit(traced)

    def call():
        return jax.block_until_ready(compiled(x, w_q, w_k, w_v, w_o))

    def lowered():
        return compiled.lower(x, w_q, w_k, w_v, w_o).compile()

    return Runner(call, numpy_outputs, compiled=lowered)
