"""What the tooling runs of PyTorch (triptych.common.backends loads it through
shared.registry): the same names in every impl_*/backend.py, each PyTorch's
answer: CUDA's asynchronous kernels, torch.set_num_threads, torch.compile and
autograd."""

import re
import warnings

import numpy as np
import torch

from impl_torch import extras, lesson
from impl_torch.arrays import to_numpy


def use_float64():
    """float64 is torch's own: nothing to turn on."""


def synchronize(value):
    """`value` once computed: CUDA kernels return before they finish."""
    if isinstance(value, torch.Tensor) and value.is_cuda:
        torch.cuda.synchronize(value.device)
    return value


def threads():
    """torch's intra-op thread count."""
    return torch.get_num_threads()


def set_threads(n):
    """Set torch's intra-op threads (its OpenMP pool too)."""
    torch.set_num_threads(n)


def threads_fixed():
    """torch takes a new thread count at any time."""
    return False


def compiled(function, **options):
    """torch.compile(function): a graph compiled on the first call."""
    return torch.compile(function, **options)


def gradients(f, leaves, d_out):
    """d/d(each leaf) of sum(f(**leaves) * d_out), by autograd's tape."""
    leaves = {n: a.detach().clone().requires_grad_(True) for n, a in leaves.items()}
    (f(**leaves) * d_out).sum().backward()
    return {n: leaf.grad for n, leaf in leaves.items()}


def cuda_device():
    """The name of the CUDA GPU torch sees, or None."""
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def use_device(device):
    """New tensors on `device` ("cpu" or "cuda") by default."""
    if device == "cuda":
        torch.set_default_device("cuda")


def float32_matmuls(tf32):
    """float32 matmuls in TF32 on a GPU (`tf32`), or in float32."""
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32


def reset_compiler():
    """Forget every graph compiled, so that the next compile is a real one."""
    torch._dynamo.reset()


def uncached(call):
    """call() with every torch.compile cache off, so that the compile it
    triggers is a real one (no graph or kernel of an earlier run reused)."""
    with warnings.catch_warnings():
        # "dynamo_pgo force disabled by ...force_disable_caches": that is the point
        warnings.filterwarnings("ignore", "dynamo_pgo force disabled")
        with torch.compiler.config.patch(force_disable_caches=True):
            return call()


def gemm(a, b, device):
    """A synchronizing a @ b of float32 (n, n) NumPy arrays on `device`."""
    a_t, b_t = (torch.from_numpy(m).to(device) for m in (a, b))
    if device == "cuda":
        return lambda: synchronize(a_t @ b_t)
    return lambda: a_t @ b_t


def gemm_library(cpu, threads):
    """MKL (its version from torch.__config__.show()), which picks its
    AVX-512 kernels on Intel CPUs only, or ATen's BLAS."""
    mkl = re.search(r"Math Kernel Library Version ([\w.\-]+)", torch.__config__.show())
    has_mkl = torch.backends.mkl.is_available()
    amd_avx512 = cpu.get("avx512f") and cpu.get("vendor") == "AuthenticAMD"
    return {
        "library": "MKL" if has_mkl else "ATen BLAS",
        "version": mkl.group(1) if mkl else None,
        "kernels": "AVX2 (MKL chooses AVX-512 on Intel CPUs only)"
        if cpu.get("vendor", "unknown") != "GenuineIntel" and has_mkl
        else torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "note": "MKL runs AVX2 kernels on this AMD CPU with AVX-512, and "
        "offers no setting to change that (MKL_DEBUG_CPU_TYPE went in "
        "2020): half the peak of AVX-512 kernels where the cores run "
        "512-bit FMAs at full width (Zen 5), about the same where they "
        "split them in two (Zen 4)"
        if amd_avx512 and has_mkl
        else None,
    }


def copy(source, target):
    """One Tensor.copy_ of the float32 NumPy array `source` into `target`."""
    source_t, target_t = torch.from_numpy(source), torch.from_numpy(target)
    return lambda: target_t.copy_(source_t)


def trainer(name, task, dtype, compile_step):
    """impl_torch.train on the task: (step, params, forward), in NumPy."""
    from impl_torch import train

    c = task.config
    params = train.init_params(task.params, dtype)
    adam = train.make_optimizer(params, c.lr, c.b1, c.b2, c.eps)
    train_step = train.compile_train_step() if compile_step else train.train_step

    def step(tokens):
        return float(train_step(params, adam, train.as_tokens(tokens), c.n_heads))

    def forward(tokens):
        with torch.no_grad():
            logits, weights = train.forward(params, train.as_tokens(tokens), c.n_heads)
        return to_numpy(logits), [to_numpy(w) for w in weights]

    def numpy_params():
        return {k: to_numpy(v) for k, v in params.items()}

    return step, numpy_params, forward


def poison(token):
    """The lab's line that sets token `token` of x to NaN, and its names."""
    return f"x_nan = x.clone(); x_nan[{token}] = torch.nan", {"torch": torch}


ADDS = "torch: vmap, the fused attention, nn.MultiheadAttention, the tape"
"""The lab's status line while `adds` runs."""
EVERY_HEAD = "torch.func.vmap over the heads' axis, one call"
"""How extras.every_head runs the one-head lesson on every head."""


def adds(heads, function, args, arrays, n_heads):
    """torch's fused attention and layer against the lesson, the device and
    the autograd tape, on the lesson's inputs `args` of `function`; `arrays`:
    x and the layer's four (C, C) weights."""
    x, w_q, w_k, w_v, w_o = arrays

    def diff(a, b):
        a, b = (to_numpy(t.detach()) for t in (a, b))
        return f"{float(np.max(np.abs(a - b))):.2g}"

    if len(args) == 4:  # the walk's head
        one = args[1:4]
    else:  # the first head's columns
        one = tuple(extras.heads_of(w, n_heads)[0] for w in (w_q, w_k, w_v))
    out, _ = lesson.single_head_attention(x, *one)
    fused = extras.fused(x, *one)
    layer_out, layer_weights = extras.call_layer(
        extras.as_layer(w_q, w_k, w_v, w_o, n_heads), x
    )
    multi_out, multi_weights = lesson.multi_head_attention(
        x, w_q, w_k, w_v, w_o, n_heads
    )
    x_leaf = args[0].detach().clone().requires_grad_()  # a leaf of the tape
    taped, _ = function(x_leaf, *args[1:])
    tape = type(taped.grad_fn).__name__
    taped.sum().backward()
    return [
        heads,
        "fused: F.scaled_dot_product_attention(q, k, v, is_causal=True), steps 3 "
        f"to 7 in one call, differs from the lesson's out by {diff(fused, out)} "
        "(and returns no weights)",
        f"a layer: nn.MultiheadAttention loaded with these weights and called as "
        f"layer(x, x, x, attn_mask=future): out differs by "
        f"{diff(layer_out, multi_out)}, weights by "
        f"{diff(layer_weights, multi_weights)}",
        f"device: every tensor here is on {x.device}; move x and the weights "
        "with .to('cuda') and the same lines run there.",
        f"autograd: with x.requires_grad_(), each line was recorded: "
        f"out.grad_fn is {tape}; out.sum().backward() filled x.grad "
        f"{tuple(x_leaf.grad.shape)}; out.detach() is the same numbers off the tape.",
    ]
