"""The adapter of a flax nnx.Module (`FlaxModule`): nnx.MultiHeadAttention,
or any nnx.Module whose nnx.Linear layers are named as in ROLES, loaded with
the problem's weights and called under jax.jit of its state (nnx.split)."""

from __future__ import annotations

import numpy as np

from triptych.check.adapters.base import mask_parameter
from triptych.check.adapters.modules import (
    Module,
    construct,
    heads_of,
    pick_layers,
)
from triptych.check.problems import W_NAMES


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
        """The module, its state zeros: built by nnx.eval_shape, which runs no
        initializer (eagerly, each would compile for each new shape); its
        projections are loaded before each call. Built for real where its
        state holds something zeros cannot stand for (a typed random key)."""
        import jax
        import jax.numpy as jnp

        nnx = self.nnx

        def make():
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

        try:
            graphdef, state = nnx.split(nnx.eval_shape(make))
            zeros = jax.tree.map(
                lambda leaf: jnp.asarray(np.zeros(leaf.shape, leaf.dtype)), state
            )
            return nnx.merge(graphdef, zeros)
        except Exception:  # e.g. a typed key: np.zeros has no such dtype
            return make()

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
        # NumPy here: an eager reshape of a JAX array compiles for each shape
        w = {n: np.asarray(weights[n]) for n in W_NAMES}
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
                qkv = np.concatenate([w[n] for n in W_NAMES[:3]], -1)
                pairs = [(layers["qkv"], qkv)]
            else:
                pairs = [(layers[r], w[f"w_{r}"]) for r in "qkv"]
            pairs.append((layers["o"], w["w_o"]))  # nnx.Linear keeps (in, out)
        for layer, value in pairs:
            layer.kernel.set_value(jnp.asarray(value))
            if getattr(layer, "bias", None) is not None:
                zeros = np.zeros(layer.bias[...].shape, value.dtype)
                layer.bias.set_value(jnp.asarray(zeros))
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
