"""The tuned modes of `triptych bench`: impl_*/tuned.py, our attention with
what a performance engineer adds (one q/k/v product, heads laid out once, a
measured block size), outside the reading path. The registry
(`triptych.bench.modes`) takes them after the blockwise modes.

    numpy-tuned      impl_numpy.tuned.multi_head_tuned_attention
    torch-tuned      impl_torch.tuned.multi_head_tuned_attention, op by op
    jax-tuned-jit    jax.jit of impl_jax.tuned.multi_head_tuned_attention, a
                     group of heads per core on threads (`on_threads`)

Checked against NumPy's naive attention like every mode, `out` only (they
return no weights). No torch.compile twin: its first call would unroll one
block per T / Bq into the graph (tens of seconds at T = 2048 here) and, measured,
ran no faster than eager (docs/bench.md).
"""

from __future__ import annotations

from shared.blocks import head_groups
from triptych.bench.modes.base import Mode, Runner
from triptych.bench.modes.runners import (
    jax_arrays,
    numpy_outputs,
    numpy_runner,
    torch_eager_runner,
)
from triptych.bench.problem import Problem


def _out_and_none(attention):
    """forward(x, w_q, w_k, w_v, w_o, H) -> (out, None), of a function that
    returns out alone."""

    def forward(x, w_q, w_k, w_v, w_o, H):
        return attention(x, w_q, w_k, w_v, w_o, H), None

    return forward


def build_numpy_tuned(problem: Problem) -> Runner:
    """impl_numpy.tuned.multi_head_tuned_attention: eager, synchronous, its
    query blocks on as many threads as the run gives NumPy's BLAS (--threads)."""
    from impl_numpy import tuned

    return numpy_runner(problem, _out_and_none(tuned.multi_head_tuned_attention))


def build_torch_tuned(problem: Problem) -> Runner:
    """impl_torch.tuned.multi_head_tuned_attention, op by op, under no_grad."""
    from impl_torch import tuned

    return torch_eager_runner(problem, _out_and_none(tuned.multi_head_tuned_attention))


def build_jax_tuned_jit(problem: Problem) -> Runner:
    """impl_jax.tuned.on_threads over a jax.jit of multi_head_tuned_attention
    made for this build (so its first call traces and compiles): a group of
    heads per core, each called from a thread of its own."""
    import jax

    from impl_jax import tuned

    (x, w_q, w_k, w_v, w_o), _ = jax_arrays(problem)
    H = problem.n_heads

    # A new function object per build: jax.jit caches its programs by function
    def attention(x, w_q, w_k, w_v, w_o, n_heads, *, block_size=None, head_dim=None):
        return tuned.multi_head_tuned_attention(
            x, w_q, w_k, w_v, w_o, n_heads, block_size=block_size, head_dim=head_dim
        )

    compiled = jax.jit(attention, static_argnames=("n_heads", "block_size", "head_dim"))
    threaded = tuned.on_threads(compiled)

    def call():
        return jax.block_until_ready(threaded(x, w_q, w_k, w_v, w_o, H)), None

    def lowered():  # every head in one program at the groups' block: the same work
        _, block = head_groups(x.shape[-2], H)
        return compiled.lower(x, w_q, w_k, w_v, w_o, H, block_size=block).compile()

    return Runner(call, numpy_outputs, compiled=lowered)


def _mode(name, framework, compiled, build, summary) -> Mode:
    return Mode(
        name=name,
        framework=framework,
        kind="ours",
        compiled=compiled,
        eager_twin=None,
        returns_weights=False,
        linear_memory=True,
        build=build,
        summary=summary,
    )


# The registry (triptych.bench.modes) takes these after .blockwise's, in order.
MODES = (
    _mode(
        "numpy-tuned",
        "numpy",
        False,
        build_numpy_tuned,
        "impl_numpy/tuned.py: one q/k/v product, query blocks, measured block size",
    ),
    _mode(
        "torch-tuned",
        "torch",
        False,
        build_torch_tuned,
        "impl_torch/tuned.py: one q/k/v product, query blocks, measured block size",
    ),
    _mode(
        "jax-tuned-jit",
        "jax",
        True,
        build_jax_tuned_jit,
        "jax.jit of impl_jax/tuned.py: one q/k/v product, online softmax, "
        "heads on threads",
    ),
)
