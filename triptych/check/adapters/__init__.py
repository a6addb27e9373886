"""How `triptych check` calls an implementation: one adapter per signature.

An adapter takes the check's float64 NumPy inputs (`problems.Inputs`: x, the
four (C, C) weights, H, a mask), hands the implementation what its
signature asks for in its framework (through the backend's `from_numpy`, in
the dtype under test) and brings the result back as float64 NumPy
(`Outcome`). The truth it is compared with is the oracle at the same level:

    multi     f(x, w_q, w_k, w_v, w_o, n_heads, mask=None)  ours; out (..., T, C)
    single    f(x, w_q, w_k, w_v, mask=None)                ours, one head, D = C
    qkv       f(q, k, v, mask=None) on (..., H, T, D): torch's
              scaled_dot_product_attention; causal implied, or asked for
              with is_causal=True where the function has that parameter
    qkv-thd   the same on (..., T, H, D): jax.nn.dot_product_attention
    module    a module class or instance: ours (a class with
              from_weights(w_q, w_k, w_v, w_o, n_heads)), torch's
              nn.MultiheadAttention, flax's nnx.MultiHeadAttention, or any
              nn.Module / nnx.Module whose linear layers are named as usual
              (q/k/v/o, query/key/value/out, q_proj/.../out_proj, or one
              packed qkv layer (C, 3C) and c_proj, as nanoGPT)

Each returns out, or (out, weights) with weights (..., H, T, T) (or
(..., T, T) for one head). A mask is boolean, True = may attend, and narrows
the causal mask; where the API reads it the other way (nn.MultiheadAttention)
the adapter turns it over. Anything else goes through an adapter hook: a
function `adapt(target)` that returns a callable of the `multi` signature
(docs/check.md#adapters).

    base.py       Adapter, what every adapter shares: the inputs at its level,
                  the oracle's truth, the call, Outcome, gradients
    functions.py  the adapters of a function: Projections (multi, single),
                  Kernel (qkv, qkv-thd)
    modules.py    the adapters of a module: ours, torch's, flax's

Which adapter calls a target (`adapter_for`: the signature read from the
target's parameters or class, or named) and the adapter hook (`hooked`) are
below. base.py is imported by the other two, this one imports all three, never
the other way.
"""

from __future__ import annotations

import inspect
import sys

from triptych.check.adapters.base import (
    MASK_NAMES,
    Adapter,
    NoAutodiffError,
    Outcome,
    mask_parameter,
    quiet,
)
from triptych.check.adapters.functions import Kernel, Projections
from triptych.check.adapters.modules import FlaxModule, OursModule, TorchModule
from triptych.check.target import TargetError, detect_framework
from triptych.common.backends import load_backend

__all__ = [
    "SIGNATURES",
    "Adapter",
    "FlaxModule",
    "Kernel",
    "NoAutodiffError",
    "OursModule",
    "Outcome",
    "Projections",
    "TorchModule",
    "adapter_for",
    "hooked",
    "quiet",
]

SIGNATURES = ("multi", "single", "qkv", "qkv-thd", "module")
QKV_FIRST = ("q", "query", "queries")


def adapter_for(target, framework: str = "auto", signature: str = "auto") -> Adapter:
    """The adapter that calls `target`, its framework and signature detected
    where "auto".

    Raises:
        TargetError: a signature no adapter fits, or one that cannot be read.
        BackendMissingError: the framework is not installed.
    """
    if framework == "auto":
        framework = detect_framework(target)
    load_backend(framework)  # one line if it is missing, before any detection
    module = module_adapter(target, framework)
    if module is not None:
        if signature not in ("auto", "module"):
            raise TargetError(f"{name_of(target)} is a module: --signature module")
        return module
    if signature == "module":
        raise TargetError(f"{name_of(target)} is not a module class or instance")
    name = getattr(target, "__name__", "")
    try:
        parameters = inspect.signature(target).parameters
    except (TypeError, ValueError):
        if name != "scaled_dot_product_attention":
            raise TargetError(
                f"cannot read the signature of {name_of(target)}: name it with "
                f"--signature ({', '.join(SIGNATURES)})"
            ) from None
        return Kernel(target, framework, "qkv", "attn_mask", "is_causal")
    names = list(parameters)
    positional = [
        p
        for p in parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    mask_name = next((n for n in MASK_NAMES if n in names), None)
    if signature == "auto":
        signature = guess_signature(target, names, positional)
    if signature.startswith("qkv"):
        causal = "is_causal" if "is_causal" in names else None
        kernel = Kernel(target, framework, signature, mask_name, causal)
        if (getattr(target, "__module__", None) or "").startswith("jax."):
            kernel.max_batch = 1  # jax.nn.dot_product_attention: (B, T, N, H) at most
        return kernel
    return Projections(target, framework, signature, mask_name)


def guess_signature(target, names, positional) -> str:
    """The signature a function's parameters say (see the module docstring)."""
    if names and names[0].lower() in QKV_FIRST:
        owner = (getattr(target, "__module__", None) or "").split(".")[0]
        return "qkv-thd" if owner in ("jax", "flax") else "qkv"
    if len(positional) >= 6 or {"n_heads", "w_o"} & set(names):
        return "multi"
    if len(positional) >= 4:
        return "single"
    raise TargetError(
        f"{name_of(target)}({', '.join(names)}) fits no signature "
        f"({', '.join(SIGNATURES)}): name one with --signature, or write an "
        f"adapter (docs/check.md#adapters)"
    )


def module_adapter(target, framework: str) -> Adapter | None:
    """The adapter of a module class or instance, or None if not one."""
    cls = target if inspect.isclass(target) else type(target)
    instance = not inspect.isclass(target)
    torch = sys.modules.get("torch")
    if torch is not None and issubclass(cls, torch.nn.Module):
        if hasattr(cls, "from_weights"):
            return OursModule(target, "torch")
        return TorchModule(target, instance)
    nnx = sys.modules.get("flax.nnx")
    if nnx is not None and issubclass(cls, nnx.Module):
        if hasattr(cls, "from_weights"):
            return OursModule(target, "jax")
        return FlaxModule(target, instance)
    if hasattr(cls, "from_weights"):
        return OursModule(target, framework)
    return None


def hooked(adapt, target, framework: str = "auto") -> Adapter:
    """The adapter hook: `adapt(target)` returns a callable of the multi
    signature, f(x, w_q, w_k, w_v, w_o, n_heads, mask=None) -> out or
    (out, weights), in the target's framework; it is checked as one."""
    if framework == "auto":
        framework = detect_framework(target)
    function = adapt(target)
    mask_name = mask_parameter(function)
    return Projections(
        function, framework, "multi", mask_name, detail=f"adapter {name_of(adapt)}"
    )


def name_of(target) -> str:
    return getattr(target, "__qualname__", None) or type(target).__name__
