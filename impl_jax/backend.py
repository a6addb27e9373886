"""What the tooling runs of JAX (triptych.common.backends loads it through
shared.registry): the same names in every impl_*/backend.py, each JAX's
answer: asynchronous dispatch, XLA's thread pool, jax.jit and jax.grad.
Importing it changes no JAX setting; `use_float64` does, when called."""

import re
import statistics
import time

import jax
import jax.numpy as jnp

from impl_jax import extras
from impl_jax.arrays import to_numpy


def use_float64():
    """Turn on JAX's 64-bit mode: float64 stays float64 (docs/contract.md)."""
    jax.config.update("jax_enable_x64", True)


def synchronize(value):
    """`value` once computed: JAX dispatches asynchronously."""
    return jax.block_until_ready(value)


def threads():
    """No count of its own: XLA sizes its pool from the cores it may use."""
    return None


def set_threads(n):
    """No setting for N threads (the process's cores decide)."""


def threads_fixed():
    """True if JAX has already created its backends (too late for XLA_FLAGS)."""
    try:
        from jax._src import xla_bridge  # no public way to ask

        return bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):
        return True  # cannot tell: assume the worst


def compiled(function, **options):
    """jax.jit(function): traced once per new shape, compiled by XLA."""
    return jax.jit(function, **options)


def gradients(f, leaves, d_out):
    """d/d(each leaf) of sum(f(**leaves) * d_out), by jax.grad."""
    return jax.grad(lambda d: (f(**d) * d_out).sum())(leaves)


def cuda_device():
    """The kind of the CUDA GPU JAX sees, or None."""
    try:
        return str(jax.devices("gpu")[0].device_kind)
    except RuntimeError:
        return None


def use_device(device):
    """Compute on `device` ("cpu" or "cuda"), chosen before JAX picks one."""
    if device == "cpu":
        jax.config.update("jax_platforms", "cpu")


def float32_matmuls(tf32):
    """float32 dots in TF32 on a GPU (`tf32`; JAX's own default), or float32."""
    jax.config.update(
        "jax_default_matmul_precision", "tensorfloat32" if tf32 else "highest"
    )


def reset_compiler():
    """Nothing to forget: each new function object traces and compiles anew."""


def uncached(call):
    """JAX keeps no compile cache on disk here (none is configured)."""
    return call()


def gemm(a, b, device):
    """A synchronizing a @ b of float32 (n, n) NumPy arrays on `device`."""
    where = jax.devices("gpu" if device == "cuda" else "cpu")[0]
    a_j, b_j = (jax.device_put(m, where) for m in (a, b))
    matmul = compiled(lambda a, b: a @ b)
    return lambda: jax.block_until_ready(matmul(a_j, b_j))


def gemm_library(cpu, threads):
    """XLA's CPU backend: the custom fusion kind of a compiled matmul names
    the library (YNNPACK, oneDNN) or none (XLA's own, Eigen)."""
    a = jnp.ones((64, 64), jnp.float32)
    text = compiled(lambda a, b: a @ b).lower(a, a).compile().as_text()
    kinds = re.findall(r'"kind":"__(\w+?)_fusion"', text)
    library = {"ynn": "YNNPACK", "xnn": "XNNPACK", "onednn": "oneDNN"}
    return {
        "library": "XLA:CPU, dot through "
        + (library.get(kinds[0], kinds[0]) if kinds else "XLA's own (Eigen)"),
        "version": jax.__version__,
        "kernels": "chosen by CPU features"
        + (" (AVX-512 here)" if cpu.get("avx512f") else ""),
        "threads": threads.get("xla"),
        "note": None,
    }


def copy(source, target):
    """None: a JAX array is immutable, there is no copy into one."""
    return None


def trainer(name, task, dtype, compile_step):
    """impl_jax.train, or impl_jax.train_flax for a "flax-" trainer, on the
    task: (step, params, forward), in NumPy."""
    from impl_jax import train

    if name.startswith("flax"):
        return _flax_trainer(task, dtype, compile_step)
    c = task.config
    state = {"params": train.init_params(task.params, dtype)}
    optimizer, state["adam"] = train.make_optimizer(
        state["params"], c.lr, c.b1, c.b2, c.eps
    )
    train_step = train.compile_train_step() if compile_step else train.train_step

    def step(tokens):
        state["params"], state["adam"], loss = train_step(
            state["params"],
            state["adam"],
            train.as_tokens(tokens),
            c.n_heads,
            optimizer,
        )
        return float(loss)

    def forward(tokens):
        logits, weights = train.forward(
            state["params"], train.as_tokens(tokens), c.n_heads
        )
        return to_numpy(logits), [to_numpy(w) for w in weights]

    def numpy_params():
        return {k: to_numpy(v) for k, v in state["params"].items()}

    return step, numpy_params, forward


def _flax_trainer(task, dtype, compile_step):
    """impl_jax.train_flax's nnx.Module and nnx.Optimizer on the task."""
    from impl_jax import train, train_flax

    c = task.config
    model = train_flax.AttentionOnlyLM(task.params, c.n_heads, dtype)
    adam = train_flax.make_optimizer(model, c.lr, c.b1, c.b2, c.eps)
    train_step = (
        train_flax.compile_train_step() if compile_step else train_flax.train_step
    )

    def step(tokens):
        return float(train_step(model, adam, train.as_tokens(tokens)))

    def forward(tokens):
        logits, weights = model(train.as_tokens(tokens))
        return to_numpy(logits), [to_numpy(w) for w in weights]

    def numpy_params():
        return {k: to_numpy(v) for k, v in model.params().items()}

    return step, numpy_params, forward


def poison(token):
    """The lab's line that sets token `token` of x to NaN, and its names."""
    line = f"x_nan = x.at[{token}].set(jnp.nan)  # a new array: JAX's are immutable"
    return line, {"jnp": jnp}


ADDS = "jax: vmap, make_jaxpr, jax.jit tracing and compiling, then timing it"
"""The lab's status line while `adds` runs."""
EVERY_HEAD = "jax.vmap over the heads' axis, one call"
"""How extras.every_head runs the one-head lesson on every head."""


def adds(heads, function, args, arrays, n_heads, calls=20):
    """The trace JAX compiles (make_jaxpr), and eager against jax.jit on the
    lesson's inputs `args` of `function`: first call, then steady."""
    one_head = args[:4]
    if len(args) > 4:  # the first head's columns
        one_head = (args[0], *(extras.heads_of(w, n_heads)[0] for w in args[1:4]))
    jaxpr = extras.trace(*one_head)
    primitives = [e.primitive.name for e in jaxpr.jaxpr.eqns]
    trace_line = (
        f"make_jaxpr: one head traced to {len(primitives)} operations, "
        f"{' '.join(dict.fromkeys(primitives))} (extras.trace; print it to see them)"
    )
    traces = []

    def counted(*args):
        traces.append(tuple(args[0].shape))  # Python runs only while tracing
        return function(*args)

    multi = len(args) > 4  # n_heads, the 6th argument, decides a reshape
    jitted = compiled(counted, static_argnums=(5,) if multi else ())
    x, *rest = args
    eager = _first_and_steady(lambda: function(*args), calls)
    fast = _first_and_steady(lambda: jitted(*args), calls)
    jitted(x[:-1], *rest)  # T - 1: a new shape
    T = x.shape[-2]
    return [
        heads,
        trace_line,
        "jax.jit traces the pure function once per new shape and compiles it "
        f"into one program: {calls + 1} calls with T = {T}, then one with "
        f"T = {T - 1}, traced {len(traces)} times"
        + (" (n_heads is static: it decides a reshape)." if multi else "."),
        f"eager: {_ms(eager[1])} a call (each op dispatched on its own); "
        f"jitted: {_ms(fast[0])} for the first call (trace and compile), "
        f"then {_ms(fast[1])} (medians of {calls} calls; they vary by "
        "machine).",
    ]


def _first_and_steady(call, calls):
    """Seconds of the first call, and the median of `calls` more."""
    start = time.perf_counter()
    synchronize(call())
    first = time.perf_counter() - start
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        synchronize(call())
        times.append(time.perf_counter() - start)
    return first, statistics.median(times)


def _ms(seconds):
    return f"{seconds * 1e3:.3g} ms"
