"""The blockwise modes of `triptych bench`: `multi_head_blockwise_attention` of
every backend (impl_*/blockwise.py), registered into `triptych.modes.MODES`
when `triptych.modes` imports this module.

    numpy-blockwise          impl_numpy.multi_head_blockwise_attention
    torch-blockwise          impl_torch.multi_head_blockwise_attention, op by op
    torch-blockwise-compile  torch.compile of the same (fullgraph, static shapes)
    jax-blockwise-jit        jax.jit of impl_jax.multi_head_blockwise_attention

Each runs at its backend's DEFAULT_BLOCK_SIZE. Their output is checked against
NumPy's naive attention like every mode's; they return no weights (they never
exist whole), so only `out` is compared. There is no eager JAX mode: eagerly,
every `lax.fori_loop` (one per query block) is traced and compiled again on
every call, which times the compiler, not the attention.

torch-blockwise-compile unrolls the Python loops into one graph of
T/B * (T/B + 1) / 2 key blocks, so its compile time grows as (T/B)^2; keep it
to moderate T.
"""

from __future__ import annotations

from triptych.modes import (
    Mode,
    Problem,
    Runner,
    _jax_arrays,
    _jax_outputs,
    _numpy_outputs,
    _torch_arrays,
    _torch_outputs,
    compiled_torch_runner,
    register,
)

# The modes whose peak memory grows as T, not T^2 (read by triptych/memory.py).
BLOCKWISE_MODES = (
    "numpy-blockwise",
    "torch-blockwise",
    "torch-blockwise-compile",
    "jax-blockwise-jit",
)


def build_numpy_blockwise(problem: Problem) -> Runner:
    """impl_numpy.multi_head_blockwise_attention: eager, synchronous."""
    import impl_numpy

    x, w_q, w_k, w_v, w_o = (impl_numpy.from_numpy(a) for a in problem.arrays)
    H = problem.n_heads

    def call():
        out, _ = impl_numpy.multi_head_blockwise_attention(x, w_q, w_k, w_v, w_o, H)
        return out, None

    return Runner(call, _numpy_outputs)


def build_torch_blockwise(problem: Problem) -> Runner:
    """impl_torch.multi_head_blockwise_attention, op by op, under no_grad."""
    import torch

    import impl_torch

    (x, w_q, w_k, w_v, w_o), sync = _torch_arrays(problem)
    H = problem.n_heads

    def call():
        with torch.no_grad():
            out, _ = impl_torch.multi_head_blockwise_attention(x, w_q, w_k, w_v, w_o, H)
        sync()
        return out, None

    return Runner(call, _torch_outputs)


def build_torch_blockwise_compile(problem: Problem) -> Runner:
    """torch.compile of impl_torch.multi_head_blockwise_attention."""
    import impl_torch

    (x, w_q, w_k, w_v, w_o), sync = _torch_arrays(problem)
    H = problem.n_heads

    def forward(x, w_q, w_k, w_v, w_o):
        out, _ = impl_torch.multi_head_blockwise_attention(x, w_q, w_k, w_v, w_o, H)
        return out, None

    return compiled_torch_runner(forward, (x, w_q, w_k, w_v, w_o), sync)


def build_jax_blockwise_jit(problem: Problem) -> Runner:
    """jax.jit of impl_jax.multi_head_blockwise_attention, traced afresh."""
    import jax

    import impl_jax

    (x, w_q, w_k, w_v, w_o), _ = _jax_arrays(problem)
    H = problem.n_heads

    # A new function per build, so that its first call is a real trace and
    # compile (jax.jit caches by function), as in the jax-jit mode.
    def forward(x, w_q, w_k, w_v, w_o):
        out, _ = impl_jax.multi_head_blockwise_attention(x, w_q, w_k, w_v, w_o, H)
        return out, None

    compiled = jax.jit(forward)

    def call():
        return jax.block_until_ready(compiled(x, w_q, w_k, w_v, w_o))

    return Runner(call, _jax_outputs)


register(
    Mode(
        name="numpy-blockwise",
        framework="numpy",
        kind="ours",
        compiled=False,
        eager_twin=None,
        build=build_numpy_blockwise,
        summary="impl_numpy.multi_head_blockwise_attention (online softmax)",
    )
)
register(
    Mode(
        name="torch-blockwise",
        framework="torch",
        kind="ours",
        compiled=False,
        eager_twin=None,
        build=build_torch_blockwise,
        summary="impl_torch.multi_head_blockwise_attention, op by op",
    )
)
register(
    Mode(
        name="torch-blockwise-compile",
        framework="torch",
        kind="ours",
        compiled=True,
        eager_twin="torch-blockwise",
        build=build_torch_blockwise_compile,
        summary="torch.compile of impl_torch.multi_head_blockwise_attention",
    )
)
register(
    Mode(
        name="jax-blockwise-jit",
        framework="jax",
        kind="ours",
        compiled=True,
        eager_twin=None,
        build=build_jax_blockwise_jit,
        summary="jax.jit of impl_jax.multi_head_blockwise_attention",
    )
)
