# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # module.py: the module forms, in JAX
#
# The module form in JAX: a flax `nnx.Module` built on four `nnx.Linear` layers.
#
# `nnx.Linear.kernel` has our (in, out) layout already, so `from_weights` copies
# the numbers as they are (through `shared.layout.to_flax_linear`, named so that
# the mapping is visible). Run it eagerly, or under `nnx.jit`.
#
# The first code cell installs the project where it is missing (in Colab). The
# functions are `impl_jax/module.py`'s, as the page shows them: edit one and
# rerun the cells below it.

# %%
# Setup: where the project is not importable (in Colab), install it from
# its repository with pip (Colab's own NumPy, torch and JAX are enough);
# where it is (a clone after `pip install -e .`), nothing happens.
import importlib
import importlib.util
import subprocess
import sys

REPOSITORY = "https://github.com/attention-triptych/attention-triptych"
if importlib.util.find_spec("impl_numpy") is None:
    print(f"installing attention-triptych from {REPOSITORY}")
    package = f"attention-triptych @ git+{REPOSITORY}"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", package], check=True)
    importlib.invalidate_caches()

# %%
import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from impl_jax import attention, kv_cache
from impl_jax.arrays import require_x64_for
from shared.convert import params_from
from shared.layout import to_flax_linear
from shared.validation.modules import (
    check_from_weights, check_module_sizes, check_module_variant,
)
from shared.variants import Variant

# %%
class CausalSelfAttention(nnx.Module):
    """Multi-head causal self-attention.

    Attributes:
        q_proj, k_proj, v_proj, out_proj: nnx.Linear(C, C), with biases or not;
            with a variant, q_proj (C, H * D), k_proj and v_proj (C, H_kv * D),
            out_proj (H * D, C).
        n_heads: H.
        scale: divide scores by sqrt(D).
        variant: the choices of its variant (a shared.Variant without arrays),
            or None for plain attention (docs/variants.md); static under
            nnx.jit.
        sinks: nnx.Param (H,) or None; q_norm, k_norm: (D,) or None.
    """

    def __init__(
        self, d_model, n_heads, *, bias=False, scale=True, variant=None, sinks=False,
        qk_norm=False, param_dtype=jnp.float32, rngs,
    ):  # fmt: skip
        """Linear layers initialized as nnx.Linear does; zero sinks if
        `sinks`, unit q_norm and k_norm if `qk_norm`; the variant's choices
        (not its arrays: they are parameters)."""
        require_x64_for(param_dtype)  # float64 needs x64 (docs/contract.md)
        variant = check_module_variant(variant)
        H, D, H_kv = check_module_sizes(d_model, n_heads, variant)
        self.n_heads = H
        self.scale = scale
        self.variant = nnx.static(variant)  # its choices: static under nnx.jit
        kwargs = dict(use_bias=bias, param_dtype=param_dtype, rngs=rngs)
        self.q_proj = nnx.Linear(d_model, H * D, **kwargs)
        self.k_proj = nnx.Linear(d_model, H_kv * D, **kwargs)
        self.v_proj = nnx.Linear(d_model, H_kv * D, **kwargs)
        self.out_proj = nnx.Linear(H * D, d_model, **kwargs)
        # nnx.data: parameters, or None until from_weights gives them
        self.sinks = nnx.data(nnx.Param(jnp.zeros(H, param_dtype)) if sinks else None)
        self.q_norm, self.k_norm = (
            nnx.data(nnx.Param(jnp.ones(D, param_dtype)) if qk_norm else None)
            for _ in "qk"
        )

    @classmethod
    def from_weights(
        cls, w_q, w_k, w_v, w_o, n_heads, *, scale=True, biases=None, variant=None
    ):
        """A module loaded with NumPy projections in the (in, out) layout, the
        biases given (zeros for the others if any is) and the variant's
        arrays; n_kv_heads and head_dim are read from the shapes."""
        weights = (w_q, w_k, w_v, w_o)
        given, variant = check_from_weights(*weights, n_heads, biases, variant)
        bias = any(name.startswith("b_") for name in given)
        module = cls(
            w_q.shape[0], n_heads, bias=bias, scale=scale, variant=variant,
            param_dtype=w_q.dtype, rngs=nnx.Rngs(0),
        )  # fmt: skip
        layers = {"q": module.q_proj, "k": module.k_proj, "v": module.v_proj}
        layers["o"] = module.out_proj
        for name, array in given.items():
            kind, _, key = name.partition("_")
            if kind == "w":  # nnx.Linear keeps (in, out), as we do
                layers[key].kernel[...] = jnp.asarray(to_flax_linear(array))
            elif kind == "b":
                layers[key].bias[...] = jnp.asarray(array)
            else:  # sinks, q_norm, k_norm
                setattr(module, name, nnx.data(nnx.Param(jnp.asarray(array))))
        return module

    @classmethod
    def from_layer(cls, layer):
        """A module with the parameters of another library's attention layer
        (shared.convert.params_from says which) and its variant (a
        transformers Llama, Qwen 3, Mistral, Gemma or gpt-oss layer's), in the
        layer's dtype."""
        p = params_from(layer)
        return cls.from_weights(
            *p.weights_as(p.dtype), p.n_heads, scale=p.scale,
            biases=p.biases_as(p.dtype), variant=p.variant_as(p.dtype),
        )  # fmt: skip

    def __call__(self, x, mask=None):
        """x (..., T, C) -> out (..., T, C), weights (..., H, T, T)."""
        return attention.multi_head_attention(
            x,
            *self.projections(),
            self.n_heads,
            mask,
            scale=self.scale,
            biases=self.biases(),
            variant=self.variant_of_call(),
        )

    def projections(self):
        """w_q, w_k, w_v, w_o (C, C): nnx.Linear's kernels, already (in, out)."""
        linears = (self.q_proj, self.k_proj, self.v_proj, self.out_proj)
        return tuple(linear.kernel[...] for linear in linears)

    def biases(self):
        """b_q, b_k, b_v, b_o by name: each Linear's bias (C,), or None. Read on
        every call, so a layer swapped for a biased one counts in forward and in
        decode_step alike."""
        linears = (self.q_proj, self.k_proj, self.v_proj, self.out_proj)
        names = ("b_q", "b_k", "b_v", "b_o")
        return {
            name: None if linear.bias is None else linear.bias[...]
            for name, linear in zip(names, linears, strict=True)
        }

    def variant_of_call(self):
        """The variant of every call: its choices with the module's sinks,
        q_norm and k_norm (None for plain attention)."""
        arrays = {"sinks": self.sinks, "q_norm": self.q_norm, "k_norm": self.k_norm}
        if self.variant is None and all(a is None for a in arrays.values()):
            return None
        arrays = {n: None if a is None else a[...] for n, a in arrays.items()}
        return dataclasses.replace(self.variant or Variant(), **arrays)

    def init_cache(self, batch, max_len):
        """An empty KVCache for decoding up to `max_len` tokens (kv_cache.py),
        of the module's KV heads and window.

        batch: the leading axes of x, e.g. () for one sequence.
        """
        kernel = self.q_proj.kernel[...]
        return kv_cache.init_kv_cache(
            batch,
            max_len,
            kernel.shape[0],
            self.n_heads,
            kernel.dtype.name,
            variant=self.variant,
        )

    def decode_step(self, x_t, cache):
        """x_t (..., C), cache -> out_t (..., C), a new cache with x_t in it.

        Pure in the cache (a new one is returned), so it runs under `nnx.jit`.
        """
        return kv_cache.decode_step(
            x_t,
            cache,
            *self.projections(),
            self.n_heads,
            scale=self.scale,
            biases=self.biases(),
            variant=self.variant_of_call(),
        )

# %% [markdown]
# ## Against the float64 oracle, in float32

# %%
from impl_jax.arrays import from_numpy, to_numpy
from shared.reference import reference_multi_head
from shared.tolerances import tolerance


def f32(a):  # a NumPy array as the framework's float32 array
    return from_numpy(np.asarray(a), "float32")


def f64(a):  # back to NumPy, in float64
    return np.asarray(to_numpy(a), np.float64)


ATOL, RTOL = tolerance("float32")  # float32's tolerance (docs/suite.md)
rng = np.random.default_rng(0)
x = rng.standard_normal((2, 6, 8))  # (B, T, C)
w = [rng.standard_normal((8, 8)) / math.sqrt(8) for _ in range(4)]  # (C, C)

# %%
# the module holding the four projections, copied from float32 NumPy arrays
module = CausalSelfAttention.from_weights(*(np.float32(a) for a in w), 2)


def forward(module, x):  # the module called
    return module(x)  # out (B, T, C), weights (B, H, T, T)


# traced once, compiled as one program
jax.clear_caches()  # an edit above is traced anew
call = jax.jit(forward)
out, _ = call(module, f32(x))
expected, _ = reference_multi_head(x, *w, 2)
distance = np.abs(f64(out) - expected).max()
print(f"the module, two heads: max |out - oracle| = {distance:.2e}")
assert np.allclose(f64(out), expected, atol=ATOL, rtol=RTOL)

# %% [markdown]
# Try it: in `projections` swap the first two, the keys' weights where the
# queries' belong, rerun: each score becomes k_i . q_j, not q_i . k_j, and the
# distance grows. The module computes nothing of its own: its call is
# attention.py's multi_head_attention on the weights it holds (docs/contract.md,
# Module forms).
