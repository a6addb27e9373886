"""What the tooling runs of NumPy (triptych.common.backends loads it through
shared.registry): the same names in every impl_*/backend.py, each NumPy's
answer. NumPy computes as written, on the CPU: no device, compiler, tape or
thread count of its own."""

import contextlib

import numpy as np


def use_float64():
    """float64 is NumPy's own: nothing to turn on."""


def synchronize(value):
    """NumPy returns when it is done."""
    return value


def threads():
    """No count of its own: its BLAS follows threadpoolctl."""
    return None


def set_threads(n):
    """No count of its own to set."""


def threads_fixed():
    """Never too late to limit its BLAS."""
    return False


def compiled(function, **options):
    """No compile step: the function as written."""
    return function


def gradients(f, leaves, d_out):
    """No autodiff: NumPy's gradients are written by hand (backward.py)."""
    raise NotImplementedError("NumPy has no autodiff")


def cuda_device():
    """NumPy sees no GPU."""
    return None


def use_device(device):
    """Always the CPU."""


def float32_matmuls(tf32):
    """float32 is float32 on a CPU."""


def reset_compiler():
    """Nothing compiled to forget."""


def uncached(call):
    """No compile cache to turn off."""
    return call()


def gemm(a, b, device):
    """a @ b, float32 (n, n) NumPy arrays, on the CPU."""
    return lambda: a @ b


def gemm_library(cpu, threads):
    """The BLAS threadpoolctl found (`threads`), with the CPU type whose
    kernels OpenBLAS runs; None where there is none."""
    pools = threads.get("threadpools", [])
    blas = next((p for p in pools if p.get("api") == "blas"), None)
    if blas is None:
        return None
    kernels = blas.get("architecture")
    note = None
    if cpu.get("avx512f") and kernels in ("Haswell", "Zen", "Sandybridge"):
        note = (
            f"OpenBLAS runs its {kernels} (AVX2) kernels on a CPU with "
            "AVX-512: start with OPENBLAS_CORETYPE=SkylakeX to use them"
        )
    found = {
        "library": blas.get("library"),
        "version": None,
        "kernels": kernels,
        "threads": blas.get("num_threads"),
        "note": note,
    }
    with contextlib.suppress(Exception):
        from threadpoolctl import threadpool_info

        for info in threadpool_info():
            if info.get("user_api") == "blas":
                found["version"] = info.get("version")
                break
    return found


def copy(source, target):
    """One copy of the float32 array `source` into `target`."""
    return lambda: np.copyto(target, source)


def trainer(name, task, dtype, compile_step):
    """impl_numpy.train on the task: (step, params, forward), in NumPy."""
    from impl_numpy import train

    c = task.config
    params = train.init_params(task.params, dtype)
    adam = train.make_optimizer(params, c.lr, c.b1, c.b2, c.eps)

    # Overflow makes NaN or Inf quietly, as in torch and JAX: the loop reports
    # a NaN loss itself, in one line.
    def quiet():
        return np.errstate(over="ignore", invalid="ignore", divide="ignore")

    def step(tokens):
        with quiet():
            loss = train.train_step(params, adam, train.as_tokens(tokens), c.n_heads)
        return float(loss)

    def forward(tokens):
        with quiet():
            return train.forward(params, train.as_tokens(tokens), c.n_heads)

    return step, lambda: params, forward


def poison(token):
    """The lab's line that sets token `token` of x to NaN, and its names."""
    return f"x_nan = x.copy(); x_nan[{token}] = np.nan", {"np": np}


ADDS = "what numpy adds"
"""The lab's status line while `adds` runs."""
EVERY_HEAD = "broadcasting over stacked (H, C, D) weights"
"""How extras.every_head runs the one-head lesson on every head."""


def adds(heads, function, args, arrays, n_heads):
    """What NumPy adds to the lesson, for the lab: nothing but broadcasting."""
    return [
        "NumPy is the plain reference: each line ran when Python reached it, on",
        "the CPU, into arrays in memory; no device, no tape, no compiler.",
        heads,
    ]
