"""How `triptych check` calls an implementation: one adapter per signature.

An adapter takes the check's float64 NumPy inputs (`problems.Inputs`: x, the
four (C, C) weights, H, a mask), hands the implementation what its
signature asks for in its framework (through the backend's `from_numpy`, in
the dtype under test) and brings the result back as float64 NumPy
(`Outcome`). The truth it is compared with is the oracle at the same level:

    multi     f(x, w_q, w_k, w_v, w_o, n_heads, mask=None)  ours; out (..., T, C)
    heads     f(x, w_q, w_k, w_v, n_heads, mask=None)       the merged heads
              (..., T, C) without the output projection (w_o applied after)
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
    functions.py  the adapters of a function: Projections (multi, heads, single),
                  Kernel (qkv, qkv-thd)
    modules.py    the adapters of a module: ours, torch's
    flax.py       the adapter of a flax nnx module
    probe.py      the batch axes a target takes, found by calling it

Which adapter calls a target (`adapter_for`: the signature read from the
target's parameters or class, or named, and tried on a small problem) and
the adapter hook (`hooked`) are below; `probe.probe` finds the batch axes a
target takes, (T, C), (B, T, C) or any, by calling it with each. base.py is
imported by the others, this one imports them all, never the other way.
"""

from __future__ import annotations

import inspect
import sys

from shared import registry
from triptych.check.adapters.base import (
    JIT_OPTIONS,
    MASK_NAMES,
    Adapter,
    NoAutodiffError,
    Outcome,
    mask_parameter,
    quiet,
)
from triptych.check.adapters.flax import FlaxModule
from triptych.check.adapters.functions import (
    Kernel,
    Projections,
    own_arity,
    passes_args_on,
    takes_one_variant,
)
from triptych.check.adapters.modules import OursModule, TorchModule
from triptych.check.adapters.options import needs_option
from triptych.check.adapters.probe import CannotCallError, settled
from triptych.check.target import TargetError, detect_framework, option
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

SIGNATURES = ("multi", "heads", "single", "qkv", "qkv-thd", "module")
CALLS = {
    "multi": "f(x, w_q, w_k, w_v, w_o, n_heads)",
    "heads": "f(x, w_q, w_k, w_v, n_heads)",
    "single": "f(x, w_q, w_k, w_v)",
    "qkv": "f(q, k, v) on (..., H, T, D)",
    "qkv-thd": "f(q, k, v) on (..., T, H, D)",
}
"""How each signature of a function is called (a mask, if any, by name)."""
ARITY = {"multi": 6, "heads": 5, "single": 4, "qkv": 3, "qkv-thd": 3}
QKV_FIRST = ("q", "query", "queries")
HEADS_PARAMETERS = (
    "n_heads",
    "n_head",
    "num_heads",
    "nhead",
    "nheads",
    "heads",
    "num_head",
    "h",
    "n_h",
)
"""Names that say a parameter is the number of heads."""


def adapter_for(
    target,
    framework: str = "auto",
    signature: str = "auto",
    *,
    batch: str = "auto",
    eager: bool = False,
    dtype: str = "float64",
    jit_options: dict | None = JIT_OPTIONS,
    variant=None,
) -> Adapter:
    """The adapter that calls `target`: its framework and signature detected
    where "auto", and the batch axes it takes (`batch`: auto, none, one or
    any) found by calling it on a small problem in `dtype` (`probe`); a JAX
    target under jax.jit with XLA's `jit_options` (None: its defaults).

    A function's signature is read from its parameters: those it can be
    called with (`candidates`), most likely first; the first that runs on the
    probe is taken. When none runs and the parameters fit several, or the one
    they fit raises a TypeError, it cannot be checked (TargetError, naming
    the signatures that fit and what each raised).

    Raises:
        TargetError: a signature no adapter fits, or one that cannot be read.
        BackendMissingError: the framework is not installed.

    With a `variant` (a triptych.check.variant.Variant), only multi and
    heads, which take x and every head's weights, and only a function that
    takes the variant's keywords (`takes_variant`).
    """
    if framework == "auto":
        framework = detect_framework(target)
    load_backend(framework)  # one line if it is missing, before any detection
    module = module_adapter(target, framework)
    if variant is not None and (module is not None or signature not in VARIANT_OK):
        what = "a module" if module is not None else f"called as {signature}, it"
        raise no_variant(target, what, variant)
    if module is not None:
        if signature not in ("auto", "module"):
            raise TargetError(
                f"{name_of(target)} is a module: {option('signature')} module"
            )
        return settled(
            [module], batch, eager, dtype, keep=True, jit_options=jit_options
        )
    if signature == "module":
        raise TargetError(f"{name_of(target)} is not a module class or instance")
    name = getattr(target, "__name__", "")
    try:
        parameters = inspect.signature(target).parameters
    except (TypeError, ValueError):
        if variant is not None:
            raise no_variant(target, "a kernel", variant) from None
        if name != "scaled_dot_product_attention":
            raise TargetError(
                f"cannot read the signature of {name_of(target)}: name it with "
                f"{option('signature')} ({', '.join(SIGNATURES)})"
            ) from None
        kernel = Kernel(target, framework, "qkv", "attn_mask", "is_causal")
        return settled(
            [kernel], batch, eager, dtype, keep=True, jit_options=jit_options
        )
    fitting, certain = candidates(target, parameters)
    if variant is not None:
        if fitting and not set(fitting) & set(VARIANT_OK):
            raise no_variant(target, f"called as {fitting[0]}, it", variant)
        fitting = [s for s in fitting if s in VARIANT_OK]
        takes_variant(target, parameters, variant)
    passes_on = passes_args_on(parameters)
    if signature != "auto":
        if (
            signature not in fitting
            and not (signature == "qkv-thd" and "qkv" in fitting)
            and not (passes_on and own_arity(parameters) <= ARITY[signature])
        ):
            raise TargetError(
                f"{header(target, parameters)} cannot be called as {signature}, "
                f"{CALLS[signature]}: {fits(fitting)}"
            )
        fitting = [signature]
    if not fitting and passes_on:  # a wrapper: what it passes on is not read
        raise TargetError(
            f"{header(target, parameters)} takes *{passes_on}, whose arguments "
            "cannot be read: name the signature it is called with, "
            f"{option('signature')} ({', '.join(SIGNATURES)})"
        )
    if not fitting:
        raise TargetError(
            f"{header(target, parameters)} fits no signature "
            f"({', '.join(SIGNATURES)}): name one with {option('signature')}, or "
            f"write an adapter (docs/check.md#adapters)"
        )
    adapters = [function_adapter(target, framework, s, parameters) for s in fitting]
    for adapter in adapters:
        adapter.variant = variant
    try:
        keep = signature != "auto" or certain
        found = settled(
            adapters, batch, eager, dtype, keep=keep, jit_options=jit_options
        )
        if variant is None:  # one written for a variant: what it was not told
            needs_option(found, header(target, parameters), parameters, dtype)
        return found
    except CannotCallError as error:
        tried = "; ".join(
            f"called as {s}, {CALLS[s]}, it raised {e}"
            for s, e in zip(fitting, error.errors, strict=True)
        )
        raise TargetError(
            f"{header(target, parameters)}: {tried}; {fits(fitting)}, or write an "
            f"adapter (docs/check.md#adapters)"
        ) from None


VARIANT_OK = ("auto", "multi", "heads")
"""The signatures a variant can be given to (auto: one of the other two)."""


def no_variant(target, what: str, variant) -> TargetError:
    """'f: a module cannot be told the variant (...)'."""
    return TargetError(
        f"{name_of(target)}: {what} cannot be told the variant ({variant.text()}): "
        f"its options go by keyword to a function of x and every head's weights "
        f"(multi or heads); write an adapter (docs/check.md#variants)"
    )


def takes_variant(target, parameters, variant) -> None:
    """Raises TargetError, one line, if the function has no `variant`
    parameter (one shared.Variant, as ours) and no parameter (or **kwargs)
    for a keyword of the variant."""
    if takes_one_variant(parameters) or any(
        p.kind == p.VAR_KEYWORD for p in parameters.values()
    ):
        return
    missing = [n for n in variant.keywords(EVERY_EXTRA) if n not in parameters]
    if missing:
        raise TargetError(
            f"{header(target, parameters)} takes no {', '.join(missing)}: the "
            f"variant's options are passed by keyword (or as variant=Variant(...), "
            f"as multi_head_attention takes them); write an adapter for other "
            f"names (docs/check.md#variants)"
        )


EVERY_EXTRA = {"sinks": None, "q_norm": None, "k_norm": None}


def function_adapter(target, framework, signature, parameters) -> Adapter:
    """The adapter of a function called with `signature`."""
    names = list(parameters)
    mask_name = next((n for n in MASK_NAMES if n in names), None)
    if signature.startswith("qkv"):
        causal = "is_causal" if "is_causal" in names else None
        return Kernel(target, framework, signature, mask_name, causal)
    one_variant = takes_one_variant(parameters)
    return Projections(target, framework, signature, mask_name, one_variant=one_variant)


def candidates(target, parameters) -> tuple[list[str], bool]:
    """The signatures a function's parameters can be called with, most likely
    first, and whether the first is certain: q, k, v by its first
    parameter's name (qkv-thd for JAX and flax); else each of multi, heads,
    single, qkv whose arguments its named positional parameters take (not
    *args: what those take cannot be read), the one its names point to first
    (a number of heads at position 5 or 6, w_o, a mask at position 5).
    Certain: named so, or the only one of its arity (six positional
    parameters are multi's, four single's, three qkv's; five may be heads, a
    mask or a w_o, and only names tell)."""
    names = list(parameters)
    if names and names[0].lower() in QKV_FIRST:
        owner = registry.owner_of_module(getattr(target, "__module__", None) or "")
        heads_first = owner is None or registry.get(owner).arrays.heads_first
        return ["qkv" if heads_first else "qkv-thd"], True
    positional = [
        p
        for p in parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    keyword_only = [
        p
        for p in parameters.values()
        if p.kind == p.KEYWORD_ONLY and p.default is p.empty
    ]
    fitting = [
        candidate
        for candidate in ("multi", "heads", "single", "qkv")
        if own_arity(parameters) <= ARITY[candidate] <= len(positional)
        and not keyword_only
    ]
    lowered = [n.lower() for n in names]
    heads_at = next((i for i, n in enumerate(lowered) if n in HEADS_PARAMETERS), None)
    first = None
    if heads_at == 5 or {"w_o", "wo", "w_out"} & set(lowered):
        first = "multi"
    elif heads_at == 4:
        first = "heads"
    elif len(lowered) > 4 and lowered[4] in MASK_NAMES:
        first = "single"
    if first in fitting:
        fitting.remove(first)
        fitting.insert(0, first)
    named = first is not None and fitting[0] == first
    return fitting, named or fitting in (["multi"], ["single"], ["qkv"])


def fits(fitting: list[str]) -> str:
    """'its parameters fit heads, single: name one with --signature'."""
    if not fitting:
        return f"its parameters fit no signature: name one with {option('signature')}"
    return (
        f"its parameters fit {', '.join(fitting)}: name the one it has with "
        f"{option('signature')}"
    )


def header(target, parameters) -> str:
    """'attention(X, Wq, Wk, Wv, heads)', 'attention(*args, **kwargs)'."""
    stars = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    shown = (stars.get(p.kind, "") + name for name, p in parameters.items())
    return f"{name_of(target)}({', '.join(shown)})"


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
        if hasattr(cls, "from_weights"):  # loaded by its layers' names if it can be:
            try:  # built once per width, not once per call (JAX compiles each)
                return FlaxModule(target, instance)
            except Exception:
                return OursModule(target, "jax")
        return FlaxModule(target, instance)
    if hasattr(cls, "from_weights"):
        return OursModule(target, framework)
    return None


def hooked(
    adapt,
    target,
    framework: str = "auto",
    *,
    batch: str = "auto",
    eager: bool = False,
    dtype: str = "float64",
    jit_options: dict | None = JIT_OPTIONS,
    variant=None,
) -> Adapter:
    """The adapter hook: `adapt(target)` returns a callable of the multi
    signature, f(x, w_q, w_k, w_v, w_o, n_heads, mask=None) -> out or
    (out, weights), in the target's framework; it is checked as one (with a
    variant, given its keywords too)."""
    if framework == "auto":
        framework = detect_framework(target)
    function = adapt(target)
    mask_name = mask_parameter(function)
    try:
        one_variant = takes_one_variant(inspect.signature(function).parameters)
    except (TypeError, ValueError):  # a builtin: its options by keyword
        one_variant = False
    adapter = Projections(
        function, framework, "multi", mask_name, detail=f"adapter {name_of(adapt)}",
        one_variant=one_variant,
    )  # fmt: skip
    adapter.variant = variant
    return settled([adapter], batch, eager, dtype, keep=True, jit_options=jit_options)


def name_of(target) -> str:
    return getattr(target, "__qualname__", None) or type(target).__name__
