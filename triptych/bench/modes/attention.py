"""The modes of impl_*.multi_head_attention, eager and compiled, and of each
framework's fused attention with the same projections (the reference lines).

    numpy          impl_numpy.multi_head_attention (eager by nature)
    torch-eager    impl_torch.multi_head_attention
    torch-compile  torch.compile of the same function (fullgraph, static shapes)
    jax-eager      impl_jax.multi_head_attention, op by op, no jit
    jax-jit        jax.jit of the same function
    flax-jit       impl_jax.CausalSelfAttention (nnx.Module) under nnx.jit
    torch-sdpa     reference: F.scaled_dot_product_attention(is_causal=True), eager
    jax-dpa        reference: jax.nn.dot_product_attention(is_causal=True), jitted

Each build function hands its forward pass to a runner factory
(`triptych.bench.modes.runners`), or builds its Runner itself where the
framework wants more (jax-eager, flax-jit).
"""

from __future__ import annotations

from triptych.bench.modes.base import Mode, Runner
from triptych.bench.modes.runners import (
    jax_arrays,
    jax_jit_runner,
    numpy_outputs,
    numpy_runner,
    torch_compile_runner,
    torch_eager_runner,
)
from triptych.bench.problem import Problem


def build_numpy(problem: Problem) -> Runner:
    """impl_numpy.multi_head_attention: eager, synchronous."""
    import impl_numpy

    return numpy_runner(problem, impl_numpy.multi_head_attention)


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
    return torch_eager_runner(problem, sdpa_forward())


def sdpa_forward(backend: str | None = None):
    """forward(x, w_q, w_k, w_v, w_o, H): our projections around
    F.scaled_dot_product_attention(is_causal=True); `backend`, the name of the
    one SDPBackend it may use (e.g. "FLASH_ATTENTION"), or None: torch picks."""
    import contextlib

    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def forward(x, w_q, w_k, w_v, w_o, H):
        B, T, C = x.shape
        q = (x @ w_q).view(B, T, H, C // H).transpose(1, 2)  # (B, H, T, D)
        k = (x @ w_k).view(B, T, H, C // H).transpose(1, 2)  # (B, H, T, D)
        v = (x @ w_v).view(B, T, H, C // H).transpose(1, 2)  # (B, H, T, D)
        only = contextlib.nullcontext()
        if backend is not None:
            only = sdpa_kernel(getattr(SDPBackend, backend))
        with only:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out = out.transpose(1, 2).reshape(B, T, C)  # (B, H, T, D) -> (B, T, C)
        return out @ w_o, None  # (B, T, C) @ (C, C) -> (B, T, C)

    return forward


def build_jax_eager(problem: Problem) -> Runner:
    """impl_jax.multi_head_attention, op by op (each op dispatched on its own)."""
    import jax

    import impl_jax

    (x, w_q, w_k, w_v, w_o), _ = jax_arrays(problem)
    H = problem.n_heads

    def call():
        outputs = impl_jax.multi_head_attention(x, w_q, w_k, w_v, w_o, H)
        return jax.block_until_ready(outputs)

    return Runner(call, numpy_outputs)


def build_jax_jit(problem: Problem) -> Runner:
    """jax.jit of impl_jax.multi_head_attention, traced afresh for this problem."""
    import impl_jax

    return jax_jit_runner(problem, impl_jax.multi_head_attention)


def build_flax_jit(problem: Problem) -> Runner:
    """impl_jax.CausalSelfAttention (nnx.Module) under nnx.jit."""
    import jax
    from flax import nnx

    import impl_jax

    (x, *_), device = jax_arrays(problem)
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

    return Runner(call, numpy_outputs)


def build_jax_dpa(problem: Problem) -> Runner:
    """Our projections around jax.nn.dot_product_attention(is_causal=True), jitted."""
    return jax_jit_runner(problem, dpa_forward())


def dpa_forward(implementation: str | None = None):
    """forward(x, w_q, w_k, w_v, w_o, H): our projections around
    jax.nn.dot_product_attention(is_causal=True, implementation=implementation)
    (None: JAX picks; "cudnn": cuDNN's fused kernel, CUDA only)."""
    import jax

    def forward(x, w_q, w_k, w_v, w_o, H):
        B, T, C = x.shape
        q = (x @ w_q).reshape(B, T, H, C // H)  # (B, T, C) -> (B, T, H, D)
        k = (x @ w_k).reshape(B, T, H, C // H)  # (B, T, C) -> (B, T, H, D)
        v = (x @ w_v).reshape(B, T, H, C // H)  # (B, T, C) -> (B, T, H, D)
        out = jax.nn.dot_product_attention(
            q, k, v, is_causal=True, implementation=implementation
        )  # (B, T, H, D)
        out = out.reshape(B, T, C)  # (B, T, H, D) -> (B, T, C)
        return out @ w_o, None  # (B, T, C) @ (C, C) -> (B, T, C)

    return forward


# The registry (triptych.bench.modes) takes these first, in this order.
MODES = (
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
    ),
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
    ),
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
    ),
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
    ),
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
    ),
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
        compiler="nnx.jit",
    ),
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
    ),
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
    ),
)
