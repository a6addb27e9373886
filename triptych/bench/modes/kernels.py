"""The kernel modes of `triptych bench`: the flash-attention kernels
(impl_*/kernel.py) compiled on a CUDA GPU, beside each framework's own fused
kernel there; the registry (`triptych.bench.modes`) takes them last.

    torch-triton      impl_torch.kernel.multi_head_flash_attention: Triton
    jax-pallas        impl_jax.kernel.multi_head_flash_attention, under jax.jit: Pallas
    torch-sdpa-flash  reference: F.scaled_dot_product_attention, flash backend only
    jax-dpa-cudnn     reference: jax.nn.dot_product_attention(implementation="cudnn")

All four are `cuda_only`: on a CPU they are skipped with the reason (the
kernels would run in their interpreters, which time the interpreter; the test
suite proves them there, docs/kernels.md). torch-triton also needs Triton (the
`kernels` extra). The kernels return no weights and hold none:
`returns_weights=False`, `linear_memory=True`. cuDNN's and the flash backend's
kernels take float16 and bfloat16 only; at another dtype their rows are errors.
"""

from __future__ import annotations

from triptych.bench.modes.attention import dpa_forward, sdpa_forward
from triptych.bench.modes.base import Mode, Runner
from triptych.bench.modes.runners import jax_jit_runner, out_only, torch_eager_runner
from triptych.bench.problem import Problem


def build_torch_triton(problem: Problem) -> Runner:
    """The Triton kernel on the problem's tensors; its first call compiles it
    afresh (Triton's caches in memory and on disk bypassed)."""
    import triton

    from impl_torch import kernel

    runner = torch_eager_runner(problem, out_only(kernel.multi_head_flash_attention))

    def first_call():
        kernel.flash_kernel.device_caches.clear()  # nothing compiled at another T
        with triton.knobs.compilation.scope():
            triton.knobs.compilation.always_compile = True  # nor kept on disk
            return runner.call()

    runner.first_call = first_call
    return runner


def build_jax_pallas(problem: Problem) -> Runner:
    """jax.jit of the Pallas kernel's multi-head form, traced afresh."""
    from impl_jax import kernel

    return jax_jit_runner(problem, out_only(kernel.multi_head_flash_attention))


def build_torch_sdpa_flash(problem: Problem) -> Runner:
    """Our projections around F.scaled_dot_product_attention, flash backend only."""
    return torch_eager_runner(problem, sdpa_forward("FLASH_ATTENTION"))


def build_jax_dpa_cudnn(problem: Problem) -> Runner:
    """Our projections around jax.nn.dot_product_attention on cuDNN, jitted."""
    return jax_jit_runner(problem, dpa_forward("cudnn"))


# The registry (triptych.bench.modes) takes these after .blockwise's, in order.
MODES = (
    Mode(
        name="torch-triton",
        framework="torch",
        kind="ours",
        compiled=True,
        eager_twin=None,
        returns_weights=False,
        linear_memory=True,
        build=build_torch_triton,
        summary="impl_torch.kernel.multi_head_flash_attention, the Triton kernel",
        cuda_only=True,
        requires=("triton",),
    ),
    Mode(
        name="jax-pallas",
        framework="jax",
        kind="ours",
        compiled=True,
        eager_twin=None,
        returns_weights=False,
        linear_memory=True,
        build=build_jax_pallas,
        summary="jax.jit of impl_jax.kernel.multi_head_flash_attention, Pallas",
        cuda_only=True,
    ),
    Mode(
        name="torch-sdpa-flash",
        framework="torch",
        kind="reference",
        compiled=False,
        eager_twin=None,
        returns_weights=False,
        linear_memory=True,
        build=build_torch_sdpa_flash,
        summary="F.scaled_dot_product_attention(is_causal=True), flash backend",
        cuda_only=True,
    ),
    Mode(
        name="jax-dpa-cudnn",
        framework="jax",
        kind="reference",
        compiled=True,
        eager_twin=None,
        returns_weights=False,
        linear_memory=True,
        build=build_jax_dpa_cudnn,
        summary='jax.jit of jax.nn.dot_product_attention(implementation="cudnn")',
        cuda_only=True,
    ),
)
