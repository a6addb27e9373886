"""What the tooling runs of the array API backend: array_api_strict computes
with NumPy underneath, on the CPU, so NumPy's answers hold but for the lab's
NaN line and what the standard adds."""

from impl_numpy.backend import (  # noqa: F401 (the hooks, as NumPy's)
    compiled,
    copy,
    cuda_device,
    float32_matmuls,
    gemm,
    gemm_library,
    gradients,
    reset_compiler,
    set_threads,
    synchronize,
    threads,
    threads_fixed,
    trainer,
    uncached,
    use_device,
    use_float64,
)

ADDS = "what the array API adds"
EVERY_HEAD = "a Python loop over the heads"


def poison(token):
    """The lab's line that sets token `token` of x to NaN, in the standard's
    words (no item assignment: a new array)."""
    import array_api_strict as xp

    rows = "xp.arange(x.shape[0])[:, None]"
    return f"x_nan = xp.where({rows} == {token}, xp.nan, x)", {"xp": xp}


def adds(heads, function, args, arrays, n_heads):
    """What the standard adds to the lesson: no device, tape or compiler, only
    the names of the operations, which every library that keeps it reads."""
    return [
        "The array API names the operations; a library that keeps it runs them.",
        heads,
    ]
