"""The adapters of a module class or instance (`Module`): ours, with
from_weights (`OursModule`), and a torch nn.Module (`TorchModule`: any whose
nn.Linear, or transformers' Conv1D, layers are named as usual, and
nn.MultiheadAttention), loaded with the problem's weights (a flax
nnx.Module's is `triptych.check.adapters.flax`); and finding a module's
projection layers by their names (ROLES) and its number of heads.

A module of transformers (GPT-2's attention, say) takes its causal mask from
the model around it: its adapter always gives one, the causal mask and the
problem's together as transformers builds it, 0 where a key may be attended
and the dtype's lowest number where not, added to the scores.
"""

from __future__ import annotations

import inspect

import numpy as np

from triptych.check.adapters.base import (
    Adapter,
    FunctionOnly,
    first,
    mask_parameter,
)
from triptych.check.problems import W_NAMES
from triptych.check.target import TargetError

HEADS_NAMES = ("n_heads", "n_head", "num_heads", "nhead", "heads")
ROLES = {
    "q": ("q", "query", "q_proj", "w_q", "wq", "to_q"),
    "k": ("k", "key", "k_proj", "w_k", "wk", "to_k"),
    "v": ("v", "value", "v_proj", "w_v", "wv", "to_v"),
    "o": ("o", "out", "out_proj", "o_proj", "c_proj", "proj", "w_o", "wo", "to_out"),
    "qkv": ("qkv", "c_attn", "in_proj", "qkv_proj", "to_qkv", "w_qkv"),
}


class Module(FunctionOnly, Adapter):
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
        """Load the weights eagerly, then the forward: for a flax module under
        jax.jit of its state (nnx.split; the state an argument, so new weights
        are never stale constants), eagerly if it cannot be traced."""
        module = self.load({n: arrays[n] for n in W_NAMES}, H, dtype)
        if not self.traced:
            return self.forward(module, arrays["x"], self.eager_mask(mask))
        import jax
        from flax import nnx

        graphdef, state = nnx.split(module)
        key = ("forward", graphdef)
        if key not in self.compiled:

            def forward(state, x, mask):
                return self.forward(nnx.merge(graphdef, state), x, mask)

            self.compiled[key] = jax.jit(forward, compiler_options=self.jit_options)
        if key in self.untraced:
            return self.forward(module, arrays["x"], self.eager_mask(mask))
        try:
            return self.compiled[key](state, arrays["x"], mask)
        except Exception:
            result = self.forward(module, arrays["x"], self.eager_mask(mask))
            self.untraceable(key)
            return result

    def autodiff_gradients(self, arrays, mask, H, d_out):
        """d/dx of sum(out * d_out) for a flax module: jax.grad under jax.jit
        of x and the module's state (nnx.split), once per module; eagerly
        where it cannot be traced."""
        module = self.load({n: arrays[n] for n in W_NAMES}, H, "float64")
        if self.traced:  # a framework that traces: JAX's (flax's module)
            import jax
            from flax import nnx

            graphdef, state = nnx.split(module)
            key = ("gradients", graphdef)
            if key not in self.compiled:

                def loss(x, state, mask, d_out):
                    out = self.forward(nnx.merge(graphdef, state), x, mask)
                    return (first(out) * d_out).sum()

                self.compiled[key] = jax.jit(
                    jax.grad(loss), compiler_options=self.jit_options
                )
            if key not in self.untraced:
                try:
                    return {"x": self.compiled[key](arrays["x"], state, mask, d_out)}
                except Exception:
                    self.untraceable(key)
        return super().autodiff_gradients(arrays, mask, H, d_out)

    def function(self, arrays, mask, H):
        module = self.load({n: arrays[n] for n in W_NAMES}, H, "float64")

        def f(x):
            return first(self.forward(module, x, mask))

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
    (or transformers' Conv1D, which keeps its weight (in, out)) are named as
    in ROLES (biases set to zero), called as module(x) or module(x, mask); a
    module of transformers always with its additive mask (`additive`)."""

    def __init__(self, target, instance):
        import torch

        self.torch = torch
        cls = type(target) if instance else target
        self.mha = issubclass(cls, torch.nn.MultiheadAttention)
        self.transformers = (cls.__module__ or "").startswith("transformers.")
        mask_name = "attn_mask" if self.mha else mask_parameter(cls.forward)
        super().__init__(
            target, "torch", cls.__name__, takes_mask=bool(mask_name), instance=instance
        )
        self.mask_name = mask_name
        if self.transformers and mask_name:
            self.detail += ", transformers' additive mask"
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
        return layers["o"].weight.shape[in_out(layers["o"])], heads_of(module)

    def layers(self, module) -> dict:
        """The projection layers of a module that is not nn.MultiheadAttention:
        its nn.Linear and Conv1D layers, by name."""
        found = {
            name.rsplit(".", 1)[-1].lower(): layer
            for name, layer in module.named_modules()
            if isinstance(layer, self.torch.nn.Linear)
            or type(layer).__name__ == "Conv1D"
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
                # nn.Linear keeps (out, in), Conv1D (in, out)
                layer.weight.copy_(value if in_out(layer) == 0 else value.T)
                if layer.bias is not None:
                    layer.bias.zero_()
        return module

    def mask_argument(self, inputs):
        if self.transformers:
            return additive(inputs)
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


def in_out(layer) -> int:
    """The axis of a layer's weight that is its input: 1 for nn.Linear
    (out, in), 0 for transformers' Conv1D (in, out)."""
    return 0 if type(layer).__name__ == "Conv1D" else 1


def additive(inputs) -> np.ndarray:
    """transformers' attention mask for a problem: the causal mask and the
    given one, (*batch, 1 or H, T, T), 0 where a key may be attended and -inf
    where not (which `Adapter.mask_in` makes the lowest finite number of the
    dtype under test, as transformers does), added to the scores."""
    *batch, T, _ = inputs.x.shape
    allowed = np.tril(np.ones((T, T), dtype=bool))
    if inputs.mask is not None:
        allowed = allowed & inputs.mask
    heads = allowed.shape[-3] if allowed.ndim >= 3 else 1
    allowed = np.broadcast_to(allowed, (*batch, heads, T, T))
    return np.where(allowed, 0.0, -np.inf)


def construct(cls, C: int, H: int, **extra):
    """cls(C, H), with `extra` keywords if it takes them (flax's rngs); or,
    for a class built from one config (nanoGPT's CausalSelfAttention(config)),
    cls(config) with a config that has the usual names of the width and heads
    (`config_of`)."""
    try:
        return cls(C, H, **extra)
    except TypeError:
        if extra:
            try:
                return cls(C, H)
            except TypeError:
                pass
        parameters = [
            p
            for p in inspect.signature(cls).parameters.values()
            if p.default is p.empty
            and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        if len(parameters) != 1 or parameters[0].name not in ("config", "cfg", "args"):
            raise
        return cls(config_of(C, H))


def config_of(C: int, H: int):
    """A config for a class built from one: the width and heads under the
    names nanoGPT, GPT-2 and others use, no dropout, biases on, and a block
    size (nanoGPT's longest sequence) of 1024."""
    import types

    return types.SimpleNamespace(
        n_embd=C,
        n_head=H,
        embed_dim=C,
        num_heads=H,
        hidden_size=C,
        num_attention_heads=H,
        d_model=C,
        n_heads=H,
        dropout=0.0,
        attn_pdrop=0.0,
        resid_pdrop=0.0,
        bias=True,
        block_size=1024,
    )


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
