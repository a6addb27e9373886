"""The adapters of a function: our signatures, f(x, w_q, w_k, w_v, w_o,
n_heads, mask) and f(x, w_q, w_k, w_v, mask) (`Projections`), and a kernel on
q, k, v, f(q, k, v, mask) in either layout (`Kernel`).
"""

from __future__ import annotations

import inspect

import numpy as np

from triptych.check.adapters.base import Adapter
from triptych.check.problems import W_NAMES


class Projections(Adapter):
    """Functions of x and the weights: multi-head f(x, w_q, w_k, w_v, w_o,
    n_heads, mask) (multi), the merged heads without the output projection
    f(x, w_q, w_k, w_v, n_heads, mask) (heads: w_o is applied after it, in
    its framework) and single-head f(x, w_q, w_k, w_v, mask) (single). The
    mask goes by its name."""

    def __init__(
        self, target, framework, signature, mask_name, detail="", one_variant=False
    ):
        super().__init__(
            target, framework, signature, takes_mask=bool(mask_name), detail=detail
        )
        self.mask_name = mask_name
        self.one_variant = one_variant  # takes variant=Variant(...), as ours
        self.one_head = signature == "single"
        if self.one_head:
            self.differentiable = ("x", *W_NAMES[:3])

    def arguments(self, arrays, H):
        """The positional arguments of the call, before any mask."""
        x, w_q, w_k, w_v = (arrays[n] for n in ("x", *W_NAMES[:3]))
        if self.signature == "single":
            return (x, w_q, w_k, w_v)
        if self.signature == "heads":
            return (x, w_q, w_k, w_v, H)
        return (x, w_q, w_k, w_v, arrays["w_o"], H)

    def call(self, arrays, mask, H, dtype):
        extra = {} if mask is None else {self.mask_name: mask}
        if self.variant is not None and self.one_variant:  # as ours takes it
            extra["variant"] = self.variant.shared(arrays)
        elif self.variant is not None:  # its options by keyword
            extra |= self.variant.keywords(arrays)
        result = self.target(*self.arguments(arrays, H), **extra)
        if self.signature != "heads":
            return result
        if isinstance(result, tuple | list):  # (merged heads, weights, ...)
            return (result[0] @ arrays["w_o"], *result[1:])
        return result @ arrays["w_o"]


class Kernel(Adapter):
    """f(q, k, v, mask=None) on (..., H, T, D), or (..., T, H, D) with
    `thd`. With an is_causal parameter, causal attention is asked for with
    it, and a mask is given as the causal mask and the given one together (as
    torch's SDPA takes no attn_mask beside is_causal=True)."""

    level = "qkv"
    differentiable = ("q", "k", "v")

    def __init__(self, target, framework, signature, mask_name, causal_name):
        super().__init__(target, framework, signature, takes_mask=bool(mask_name))
        self.mask_name, self.causal_name = mask_name, causal_name
        self.thd = signature == "qkv-thd"

    def mask_argument(self, inputs):
        mask = super().mask_argument(inputs)
        if mask is None or not self.causal_name:
            return mask
        T = inputs.x.shape[-2]
        return np.tril(np.ones((T, T), dtype=bool)) & mask  # is_causal=False

    def call(self, arrays, mask, H, dtype):
        q, k, v = (arrays[n] for n in "qkv")
        if self.thd:  # (..., H, T, D) -> (..., T, H, D)
            q, k, v = (a.swapaxes(-3, -2) for a in (q, k, v))
        extra = {} if mask is None else {self.mask_name: mask}
        if self.causal_name:
            extra[self.causal_name] = mask is None
        out = self.target(q, k, v, **extra)
        return out.swapaxes(-3, -2) if self.thd else out


def takes_one_variant(parameters) -> bool:
    """Whether a function takes its variant as one value, variant=Variant(...),
    as ours does (a **variant of keywords does not)."""
    found = parameters.get("variant")
    return found is not None and found.kind not in (
        found.VAR_KEYWORD,
        found.VAR_POSITIONAL,
    )


def passes_args_on(parameters) -> str | None:
    """The name of a function's *args (a wrapper's, whose arguments are read
    where it passes them on, not here), or None."""
    return next((n for n, p in parameters.items() if p.kind == p.VAR_POSITIONAL), None)


def own_arity(parameters) -> int:
    """The positional arguments a function itself requires (before *args)."""
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(p.kind in kinds and p.default is p.empty for p in parameters.values())
