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
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import warnings
from typing import NamedTuple

import numpy as np

from triptych.check.problems import (
    W_NAMES,
    Inputs,
    qkv_of,
    single_head_mask,
    truth_of_projections,
    truth_of_qkv,
)
from triptych.check.target import TargetError, detect_framework
from triptych.common.backends import load_backend

SIGNATURES = ("multi", "single", "qkv", "qkv-thd", "module")
MASK_NAMES = ("mask", "attn_mask", "attention_mask")
QKV_FIRST = ("q", "query", "queries")
HEADS_NAMES = ("n_heads", "n_head", "num_heads", "nhead", "heads")
ROLES = {
    "q": ("q", "query", "q_proj", "w_q", "wq", "to_q"),
    "k": ("k", "key", "k_proj", "w_k", "wk", "to_k"),
    "v": ("v", "value", "v_proj", "w_v", "wv", "to_v"),
    "o": ("o", "out", "out_proj", "o_proj", "c_proj", "proj", "w_o", "wo", "to_out"),
    "qkv": ("qkv", "c_attn", "in_proj", "qkv_proj", "to_qkv", "w_qkv"),
}


class NoAutodiffError(Exception):
    """The framework has no automatic differentiation (NumPy)."""


class Outcome(NamedTuple):
    """What an implementation returned, as float64 NumPy.

    Attributes:
        out: (..., T, C), or (..., H, T, D) for q, k, v.
        weights: (..., H, T, T), or None when it returns none (or returns
            them in another shape, e.g. averaged over heads).
        dtype: the dtype name of out as returned.
    """

    out: np.ndarray
    weights: np.ndarray | None
    dtype: str


@contextlib.contextmanager
def quiet():
    """The implementation's warnings and NumPy's floating-point complaints
    silenced: a NaN it computes is a result, not a warning."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        yield


class Adapter:
    """Calls one target. Subclasses set `call`; the rest is shared.

    Attributes:
        target: what the user named. framework: numpy, torch or jax.
        signature: one of SIGNATURES. detail: a word more (e.g. the module).
        level: "x" (x and the weights) or "qkv" (q, k, v).
        takes_mask: it accepts a mask. one_head: single-head form.
        fixed: (C, H) of a module instance, else None.
        max_batch: how many batch axes x may have.
        differentiable: the inputs gradients are taken for.
    """

    level = "x"
    one_head = False
    differentiable: tuple[str, ...] = ("x", *W_NAMES)

    def __init__(self, target, framework, signature, *, takes_mask, detail=""):
        self.target, self.framework, self.signature = target, framework, signature
        self.takes_mask, self.detail = takes_mask, detail
        self.fixed: tuple[int, int] | None = None
        self.max_batch = 2
        self.backend = load_backend(framework)
        self.jit = True  # JAX only: see `invoke`
        self.judged: str | None = None  # see properties.judged
        self.compiled: dict = {}

    @property
    def several_heads(self) -> bool:
        return not self.one_head and (self.fixed is None or self.fixed[1] > 1)

    def describe(self) -> str:
        detail = f" ({self.detail})" if self.detail else ""
        return f"{self.signature}{detail}, {self.framework}"

    # What the implementation is given, and the truth on it

    def arrays(self, inputs: Inputs, dtype: str) -> dict[str, np.ndarray]:
        """The inputs at this level as the implementation holds them in
        `dtype` (float64 values)."""
        if self.level == "qkv":
            return qkv_of(inputs, dtype)
        rounded = inputs.rounded(dtype)
        names = W_NAMES[:3] if self.one_head else W_NAMES
        return {"x": rounded.x, **{n: rounded.w[n] for n in names}}

    def mask_argument(self, inputs: Inputs) -> np.ndarray | None:
        """The mask (NumPy) this signature is given for the problem's: the
        mask itself (no head axis for one head), None for causal only."""
        if inputs.mask is None:
            return None
        if not self.takes_mask:
            raise ValueError("a mask for a signature that takes none")
        return single_head_mask(inputs.mask) if self.one_head else inputs.mask

    def mask_in(self, inputs: Inputs):
        """`mask_argument` as the framework's array (None stays None)."""
        mask = self.mask_argument(inputs)
        return None if mask is None else self.backend.from_numpy(np.array(mask))

    def truth(self, inputs: Inputs, dtype: str) -> Outcome:
        """The float64 oracle on what the implementation is given in `dtype`."""
        out, weights = self.truth_of(self.arrays(inputs, dtype), inputs.mask, inputs.H)
        return Outcome(out, weights, "float64")

    def truth_of(self, arrays, mask, H):
        """The oracle's (out, weights) on `arrays` of this level."""
        if self.level == "qkv":
            return truth_of_qkv(arrays["q"], arrays["k"], arrays["v"], mask)
        w = {n: arrays.get(n) for n in W_NAMES}
        return truth_of_projections(Inputs(arrays["x"], w, H, mask), self.one_head)

    # Calling it

    def run(self, inputs: Inputs, dtype: str) -> Outcome:
        """The implementation on `inputs` in `dtype`."""
        arrays = {
            name: self.backend.from_numpy(a, dtype)
            for name, a in self.arrays(inputs, dtype).items()
        }
        with quiet():
            result = self.invoke(arrays, self.mask_in(inputs), inputs.H, dtype)
        return self.outcome(result, inputs)

    def call(self, arrays: dict, mask, H: int, dtype: str):
        """The target on framework `arrays` of this level and the framework's
        mask (`mask_in`); its raw result."""
        raise NotImplementedError

    def invoke(self, arrays: dict, mask, H: int, dtype: str):
        """`call`, under jax.jit for JAX: one compile per new shape instead of
        one per operation. A target that cannot be traced runs eagerly from
        then on (its own error, if it raises eagerly too)."""
        if self.framework != "jax" or not self.jit:
            return self.call(arrays, mask, H, dtype)
        import jax

        names = tuple(arrays)
        key = (names, H, dtype)
        if key not in self.compiled:

            def traced(values, mask):
                return self.call(dict(zip(names, values, strict=True)), mask, H, dtype)

            self.compiled[key] = jax.jit(traced)
        try:
            return self.compiled[key](tuple(arrays.values()), mask)
        except Exception:
            result = self.call(arrays, mask, H, dtype)
            self.jit = False
            return result

    def outcome(self, result, inputs: Inputs) -> Outcome:
        """The raw result as an Outcome (weights None where not comparable)."""
        weights = None
        if isinstance(result, tuple | list) and len(result) == 2:
            result, weights = result
        out = np.asarray(self.backend.to_numpy(result))
        dtype = out.dtype.name
        if weights is not None:
            *batch, T, _ = inputs.x.shape
            weights = np.asarray(self.backend.to_numpy(weights), dtype=np.float64)
            if self.one_head:
                weights = weights[..., None, :, :]
            if weights.shape != (*batch, inputs.H, T, T):
                weights = None  # e.g. averaged over heads: nothing to compare
        return Outcome(out.astype(np.float64), weights, dtype)

    # Gradients

    def function(self, arrays: dict, mask, H: int):
        """A function of the differentiable arrays (keywords) -> out."""

        def f(**changed):
            result = self.call({**arrays, **changed}, mask, H, "float64")
            return result[0] if isinstance(result, tuple | list) else result

        return f

    def gradients(self, inputs: Inputs, d_out: np.ndarray) -> dict[str, np.ndarray]:
        """d/d(each differentiable input) of sum(out * d_out), float64, by the
        framework's autodiff.

        Raises:
            NoAutodiffError: NumPy.
        """
        if self.framework == "numpy":
            raise NoAutodiffError
        b = self.backend
        arrays = {
            n: b.from_numpy(a, "float64")
            for n, a in self.arrays(inputs, "float64").items()
        }
        f = self.function(arrays, self.mask_in(inputs), inputs.H)
        d_out_in = b.from_numpy(d_out, "float64")
        with quiet():
            if self.framework == "torch":
                leaves = {
                    n: arrays[n].detach().clone().requires_grad_(True)
                    for n in self.differentiable
                }
                (f(**leaves) * d_out_in).sum().backward()
                grads = {n: leaves[n].grad for n in self.differentiable}
            else:
                import jax

                grad = jax.grad(lambda d: (f(**d) * d_out_in).sum())
                leaves = {n: arrays[n] for n in self.differentiable}
                try:
                    grads = jax.jit(grad)(leaves) if self.jit else grad(leaves)
                except Exception:
                    grads = grad(leaves)
        return {
            n: np.zeros(arrays[n].shape)
            if g is None
            else np.asarray(b.to_numpy(g), dtype=np.float64)
            for n, g in grads.items()
        }


class Projections(Adapter):
    """Our signatures: multi-head f(x, w_q, w_k, w_v, w_o, n_heads, mask) and
    single-head f(x, w_q, w_k, w_v, mask)."""

    def __init__(self, target, framework, signature, mask_name, detail=""):
        super().__init__(
            target, framework, signature, takes_mask=bool(mask_name), detail=detail
        )
        self.mask_name = mask_name
        self.one_head = signature == "single"
        if self.one_head:
            self.differentiable = ("x", *W_NAMES[:3])

    def call(self, arrays, mask, H, dtype):
        extra = {} if mask is None else {self.mask_name: mask}
        x, w_q, w_k, w_v = (arrays[n] for n in ("x", *W_NAMES[:3]))
        if self.one_head:
            return self.target(x, w_q, w_k, w_v, **extra)
        return self.target(x, w_q, w_k, w_v, arrays["w_o"], H, **extra)


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


class Module(Adapter):
    """A module: built (a class, for each C and H) or loaded (an instance)
    with the problem's weights, then called on x. Subclasses know one kind."""

    differentiable = ("x",)

    def __init__(self, target, framework, detail, *, takes_mask, instance):
        super().__init__(
            target, framework, "module", takes_mask=takes_mask, detail=detail
        )
        self.instance = instance
        self.built: dict = {}

    def call(self, arrays, mask, H, dtype):
        weights = {n: arrays[n] for n in W_NAMES}
        return self.forward(self.load(weights, H, dtype), arrays["x"], mask)

    def invoke(self, arrays, mask, H, dtype):
        """Load the weights eagerly, then the forward: under nnx.jit for a
        flax module (its state an argument, so new weights are never stale
        constants), eagerly if it cannot be traced."""
        module = self.load({n: arrays[n] for n in W_NAMES}, H, dtype)
        if self.framework != "jax" or not self.jit:
            return self.forward(module, arrays["x"], mask)
        from flax import nnx

        if "forward" not in self.compiled:
            self.compiled["forward"] = nnx.jit(
                lambda module, x, mask: self.forward(module, x, mask)
            )
        try:
            return self.compiled["forward"](module, arrays["x"], mask)
        except Exception:
            result = self.forward(module, arrays["x"], mask)
            self.jit = False
            return result

    def function(self, arrays, mask, H):
        module = self.load({n: arrays[n] for n in W_NAMES}, H, "float64")

        def f(x):
            result = self.forward(module, x, mask)
            return result[0] if isinstance(result, tuple | list) else result

        return f

    def module_for(self, C: int, H: int, dtype: str):
        """The instance, or a module of the class built once per (C, H, dtype)."""
        if self.instance:
            return self.target
        key = (C, H, dtype)
        if key not in self.built:
            self.built[key] = self.build(C, H, dtype)
        return self.built[key]

    def load(self, weights: dict, H: int, dtype: str):
        raise NotImplementedError

    def build(self, C: int, H: int, dtype: str):
        raise NotImplementedError

    def forward(self, module, x, mask):
        """The module on x with the framework's mask (`mask_in`)."""
        raise NotImplementedError


class OursModule(Module):
    """A class with from_weights(w_q, w_k, w_v, w_o, n_heads) of (C, C) NumPy
    weights, called as module(x, mask) (our CausalSelfAttention)."""

    def __init__(self, target, framework):
        cls = target if inspect.isclass(target) else type(target)
        self.mask_name = mask_parameter(getattr(cls, "forward", cls.__call__))
        super().__init__(
            cls,
            framework,
            f"{cls.__name__}.from_weights",
            takes_mask=self.mask_name is not None,
            instance=False,
        )

    def load(self, weights, H, dtype):
        numpy = [self.backend.to_numpy(weights[n]) for n in W_NAMES]
        return self.target.from_weights(*numpy, H)

    def forward(self, module, x, mask):
        return module(x, **({} if mask is None else {self.mask_name: mask}))


class TorchModule(Module):
    """A torch nn.Module: nn.MultiheadAttention, or one whose nn.Linear layers
    are named as in ROLES (biases set to zero), called as module(x) or
    module(x, mask)."""

    def __init__(self, target, instance):
        import torch

        self.torch = torch
        cls = type(target) if instance else target
        self.mha = issubclass(cls, torch.nn.MultiheadAttention)
        mask_name = "attn_mask" if self.mha else mask_parameter(cls.forward)
        super().__init__(
            target, "torch", cls.__name__, takes_mask=bool(mask_name), instance=instance
        )
        self.mask_name = mask_name
        self.max_batch = 1 if self.mha else 2
        if instance:
            self.fixed = self.widths(target)
        elif not self.mha:
            self.layers(self.build(8, 2, "float32"))  # fails early, with a reason

    def build(self, C, H, dtype):
        if self.mha:
            module = self.target(C, H, bias=False, batch_first=True)
        else:
            module = construct(self.target, C, H)
        return module.to(getattr(self.torch, dtype)).eval()

    def widths(self, module) -> tuple[int, int]:
        if self.mha:
            return module.embed_dim, module.num_heads
        layers = self.layers(module)
        return layers["o"].in_features, heads_of(module)

    def layers(self, module) -> dict:
        """The projection layers of a module that is not nn.MultiheadAttention."""
        found = {
            name.rsplit(".", 1)[-1].lower(): layer
            for name, layer in module.named_modules()
            if isinstance(layer, self.torch.nn.Linear)
        }
        return pick_layers(found, type(module).__name__)

    def load(self, weights, H, dtype):
        torch = self.torch
        C = weights["w_q"].shape[0]
        module = self.module_for(C, H, dtype)
        module.to(getattr(torch, dtype)).eval()
        w = {n: weights[n].detach() for n in W_NAMES}
        with torch.no_grad():
            if self.mha:
                module.in_proj_weight.copy_(torch.cat([w[n].T for n in W_NAMES[:3]]))
                module.out_proj.weight.copy_(w["w_o"].T)
                for bias in (module.in_proj_bias, module.out_proj.bias):
                    if bias is not None:
                        bias.zero_()
                return module
            layers = self.layers(module)
            if "qkv" in layers:
                pairs = [(layers["qkv"], torch.cat([w[n] for n in W_NAMES[:3]], -1))]
            else:
                pairs = [(layers[r], w[f"w_{r}"]) for r in "qkv"]
            for layer, value in [*pairs, (layers["o"], w["w_o"])]:
                layer.weight.copy_(value.T)  # nn.Linear keeps (out, in)
                if layer.bias is not None:
                    layer.bias.zero_()
        return module

    def mask_argument(self, inputs):
        if not self.mha:
            return super().mask_argument(inputs)
        *batch, T, _ = inputs.x.shape
        allowed = np.tril(np.ones((T, T), dtype=bool))
        if inputs.mask is not None:  # (B, H, T, T) -> (B * H, T, T), as MHA takes it
            allowed = np.broadcast_to(allowed & inputs.mask, (*batch, inputs.H, T, T))
            allowed = allowed.reshape(-1, T, T)
        return ~allowed  # nn.MultiheadAttention: True = may NOT attend

    def forward(self, module, x, mask):
        if not self.mha:
            return module(x, **({} if mask is None else {self.mask_name: mask}))
        if not module.batch_first and x.ndim == 3:
            x = x.transpose(0, 1)
        out, weights = module(
            x, x, x, attn_mask=mask, need_weights=True, average_attn_weights=False
        )
        if not module.batch_first and x.ndim == 3:
            out = out.transpose(0, 1)
        return out, weights


class FlaxModule(Module):
    """A flax nnx.Module: nnx.MultiHeadAttention (called with the causal mask
    and the given one, decode=False), or one whose nnx.Linear attributes are
    named as in ROLES (biases set to zero), called as module(x) or
    module(x, mask)."""

    def __init__(self, target, instance):
        from flax import nnx

        self.nnx = nnx
        cls = type(target) if instance else target
        self.mha = issubclass(cls, nnx.MultiHeadAttention)
        mask_name = "mask" if self.mha else mask_parameter(cls.__call__)
        super().__init__(
            target, "jax", cls.__name__, takes_mask=bool(mask_name), instance=instance
        )
        self.mask_name = mask_name
        if instance:
            self.fixed = self.widths(target)
        elif not self.mha:
            self.layers(self.build(8, 2, "float32"))  # fails early, with a reason

    def build(self, C, H, dtype):
        import jax.numpy as jnp

        nnx = self.nnx
        if self.mha:
            return self.target(
                num_heads=H,
                in_features=C,
                qkv_features=C,
                use_bias=False,
                param_dtype=jnp.dtype(dtype),
                decode=False,
                rngs=nnx.Rngs(0),
            )
        return construct(self.target, C, H, rngs=nnx.Rngs(0))

    def widths(self, module) -> tuple[int, int]:
        if self.mha:
            return module.in_features, module.num_heads
        return self.layers(module)["o"].in_features, heads_of(module)

    def layers(self, module) -> dict:
        found = {
            name.lower(): layer
            for name, layer in vars(module).items()
            if isinstance(layer, self.nnx.Linear)
        }
        return pick_layers(found, type(module).__name__)

    def load(self, weights, H, dtype):
        import jax.numpy as jnp

        C = weights["w_q"].shape[0]
        module = self.module_for(C, H, dtype)
        w = {n: jnp.asarray(weights[n]) for n in W_NAMES}
        if self.mha:
            D = C // H
            pairs = [
                (module.query, w["w_q"].reshape(C, H, D)),  # (C, H, D)
                (module.key, w["w_k"].reshape(C, H, D)),
                (module.value, w["w_v"].reshape(C, H, D)),
                (module.out, w["w_o"].reshape(H, D, C)),  # (H, D, C)
            ]
        else:
            layers = self.layers(module)
            if "qkv" in layers:
                qkv = jnp.concatenate([w[n] for n in W_NAMES[:3]], -1)
                pairs = [(layers["qkv"], qkv)]
            else:
                pairs = [(layers[r], w[f"w_{r}"]) for r in "qkv"]
            pairs.append((layers["o"], w["w_o"]))  # nnx.Linear keeps (in, out)
        for layer, value in pairs:
            layer.kernel.set_value(value)
            if getattr(layer, "bias", None) is not None:
                layer.bias.set_value(jnp.zeros_like(layer.bias[...], dtype=value.dtype))
        return module

    def mask_argument(self, inputs):
        if not self.mha:
            return super().mask_argument(inputs)
        T = inputs.x.shape[-2]
        allowed = np.tril(np.ones((T, T), dtype=bool))
        return allowed if inputs.mask is None else allowed & inputs.mask

    def forward(self, module, x, mask):
        if not self.mha:
            return module(x, **({} if mask is None else {self.mask_name: mask}))
        return module(x, mask=mask, decode=False)


def construct(cls, C: int, H: int, **extra):
    """cls(C, H), with `extra` keywords if it takes them (flax's rngs)."""
    try:
        return cls(C, H, **extra)
    except TypeError:
        if not extra:
            raise
        return cls(C, H)


def pick_layers(found: dict, name: str) -> dict:
    """The q, k, v (or one packed qkv) and o layers among `found` (by name).

    Raises:
        TargetError: they are not all there.
    """
    roles = {}
    for role, names in ROLES.items():
        for candidate in names:
            if candidate in found:
                roles[role] = found[candidate]
                break
    if "o" in roles and ("qkv" in roles or all(r in roles for r in "qkv")):
        return {r: roles[r] for r in ("qkv", "q", "k", "v", "o") if r in roles}
    raise TargetError(
        f"cannot find the projections of {name}: linear layers named "
        f"{sorted(found) or 'none'}; name them q, k, v and o (or query/key/value/"
        f"out, q_proj/.../out_proj, qkv or c_attn with c_proj), or write an "
        f"adapter (docs/check.md#adapters)"
    )


def heads_of(module) -> int:
    for name in HEADS_NAMES:
        value = getattr(module, name, None)
        if isinstance(value, int) and value > 0:
            return value
    raise TargetError(
        f"{type(module).__name__} has none of the attributes {', '.join(HEADS_NAMES)} "
        f"to say its number of heads"
    )


def mask_parameter(function) -> str | None:
    """The name of `function`'s mask parameter (MASK_NAMES), or None."""
    try:
        names = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return None
    return next((n for n in MASK_NAMES if n in names), None)


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
