"""The blockwise modes of `triptych bench`: `multi_head_blockwise_attention` of
every backend (impl_*/blockwise.py), which the registry
(`triptych.bench.modes`) takes after those of `.attention`.

    numpy-blockwise          impl_numpy.multi_head_blockwise_attention
    torch-blockwise          impl_torch.multi_head_blockwise_attention, op by op
    torch-blockwise-compile  torch.compile of the same (fullgraph, static shapes)
    jax-blockwise-jit        jax.jit of impl_jax.multi_head_blockwise_attention

Each runs at its backend's DEFAULT_BLOCK_SIZE. Their output is checked against
NumPy's naive attention like every mode's; they return no weights (they never
exist whole), so only `out` is compared: `returns_weights=False`, and
`linear_memory=True` for `triptych bench --memory`. There is no eager JAX mode: eagerly,
every `lax.fori_loop` (one per query block) is traced and compiled again on
every call, which times the compiler, not the attention.

torch-blockwise-compile unrolls the Python loops into one graph of
T/B * (T/B + 1) / 2 key blocks, so its compile time grows as (T/B)^2; keep it
to moderate T.
"""

from __future__ import annotations

from triptych.bench.modes.base import Mode, Runner
from triptych.bench.modes.runners import (
    jax_jit_runner,
    numpy_runner,
    out_only,
    torch_compile_runner,
    torch_eager_runner,
)
from triptych.bench.problem import Problem


def build_numpy_blockwise(problem: Problem) -> Runner:
    """impl_numpy.multi_head_blockwise_attention: eager, synchronous."""
    import impl_numpy

    forward = out_only(impl_numpy.multi_head_blockwise_attention)
    return numpy_runner(problem, forward)


def build_torch_blockwise(problem: Problem) -> Runner:
    """impl_torch.multi_head_blockwise_attention, op by op, under no_grad."""
    import impl_torch

    forward = out_only(impl_torch.multi_head_blockwise_attention)
    return torch_eager_runner(problem, forward)


def build_torch_blockwise_compile(problem: Problem) -> Runner:
    """torch.compile of impl_torch.multi_head_blockwise_attention."""
    import impl_torch

    forward = out_only(impl_torch.multi_head_blockwise_attention)
    return torch_compile_runner(problem, forward)


def build_jax_blockwise_jit(problem: Problem) -> Runner:
    """jax.jit of impl_jax.multi_head_blockwise_attention, traced afresh."""
    import impl_jax

    forward = out_only(impl_jax.multi_head_blockwise_attention)
    return jax_jit_runner(problem, forward)


# The registry (triptych.bench.modes) takes these after .attention's, in order.
MODES = (
    Mode(
        name="numpy-blockwise",
        framework="numpy",
        kind="ours",
        compiled=False,
        eager_twin=None,
        returns_weights=False,
        linear_memory=True,
        build=build_numpy_blockwise,
        summary="impl_numpy.multi_head_blockwise_attention (online softmax)",
    ),
    Mode(
        name="torch-blockwise",
        framework="torch",
        kind="ours",
        compiled=False,
        eager_twin=None,
        returns_weights=False,
        linear_memory=True,
        build=build_torch_blockwise,
        summary="impl_torch.multi_head_blockwise_attention, op by op",
    ),
    Mode(
        name="torch-blockwise-compile",
        framework="torch",
        kind="ours",
        compiled=True,
        eager_twin="torch-blockwise",
        returns_weights=False,
        linear_memory=True,
        build=build_torch_blockwise_compile,
        summary="torch.compile of impl_torch.multi_head_blockwise_attention",
    ),
    Mode(
        name="jax-blockwise-jit",
        framework="jax",
        kind="ours",
        compiled=True,
        eager_twin=None,
        returns_weights=False,
        linear_memory=True,
        build=build_jax_blockwise_jit,
        summary="jax.jit of impl_jax.multi_head_blockwise_attention",
    ),
)
