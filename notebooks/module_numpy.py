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
# # module.py: the module forms, in NumPy
#
# The module form in NumPy: a plain class that holds the four projections.
#
# NumPy has no module system, so this is the functional form with its parameters
# kept on an object, called like the torch and flax modules: `module(x)` returns
# `(out, weights)`.
#
# The first code cell installs the project where it is missing (in Colab). The
# functions are `impl_numpy/module.py`'s, as the page shows them: edit one and
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

import numpy as np

from impl_numpy import attention, kv_cache
from shared.convert import params_from
from shared.validation.modules import (
    check_from_weights, check_module_sizes, check_module_variant,
)
from shared.variants import Variant

# %%
class CausalSelfAttention:
    """Multi-head causal self-attention with weights in the (in, out) layout.

    Attributes:
        w_q, w_k, w_v, w_o: (C, C) projections; with a variant, w_q (C, H * D),
            w_k and w_v (C, H_kv * D), w_o (H * D, C).
        b_q, b_k, b_v, b_o: biases to match, or None (a module built without).
        n_heads: H.
        scale: divide scores by sqrt(D).
        variant: the choices of its variant (a shared.Variant without arrays),
            or None for plain attention (docs/variants.md).
        sinks: (H,) or None; q_norm, k_norm: (D,) or None.
    """

    def __init__(
        self, d_model, n_heads, *, bias=False, scale=True, variant=None, sinks=False,
        qk_norm=False, seed=0, dtype=np.float32,
    ):  # fmt: skip
        """Random N(0, 1/C) weights from `numpy.random.default_rng(seed)`; zero
        biases if `bias`; zero sinks if `sinks`, unit q_norm and k_norm if
        `qk_norm`; the variant's choices (not its arrays: they are parameters)."""
        self.variant = check_module_variant(variant)
        H, D, H_kv = check_module_sizes(d_model, n_heads, self.variant)
        self.n_heads = H
        self.scale = scale
        rng = np.random.default_rng(seed)
        shapes = (d_model, H * D), (d_model, H_kv * D), (d_model, H_kv * D)
        shapes += ((H * D, d_model),)
        self.w_q, self.w_k, self.w_v, self.w_o = (
            (rng.standard_normal(shape) / np.sqrt(d_model)).astype(dtype)
            for shape in shapes
        )
        sizes = (H * D, H_kv * D, H_kv * D, d_model)
        self.b_q, self.b_k, self.b_v, self.b_o = (
            np.zeros(size, dtype) if bias else None for size in sizes
        )
        self.sinks = np.zeros(H, dtype) if sinks else None
        self.q_norm, self.k_norm = (
            np.ones(D, dtype) if qk_norm else None for _ in "qk"
        )

    @classmethod
    def from_weights(
        cls, w_q, w_k, w_v, w_o, n_heads, *, scale=True, biases=None, variant=None
    ):
        """A module holding copies of NumPy projections in the (in, out) layout,
        of the biases given (zeros for the others if any is) and of the
        variant's arrays; n_kv_heads and head_dim are read from the shapes."""
        weights = (w_q, w_k, w_v, w_o)
        given, variant = check_from_weights(*weights, n_heads, biases, variant)
        bias = any(name.startswith("b_") for name in given)
        module = cls(
            w_q.shape[0], n_heads, bias=bias, scale=scale, variant=variant,
            dtype=w_q.dtype,
        )  # fmt: skip
        for name, array in given.items():
            setattr(module, name, np.array(array))
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
        """w_q, w_k, w_v, w_o (C, C), in our (in, out) layout."""
        return self.w_q, self.w_k, self.w_v, self.w_o

    def biases(self):
        """b_q, b_k, b_v, b_o by name: (C,) each, or None."""
        return {"b_q": self.b_q, "b_k": self.b_k, "b_v": self.b_v, "b_o": self.b_o}

    def variant_of_call(self):
        """The variant of every call: its choices with the module's sinks,
        q_norm and k_norm (None for plain attention)."""
        arrays = {"sinks": self.sinks, "q_norm": self.q_norm, "k_norm": self.k_norm}
        if self.variant is None and all(a is None for a in arrays.values()):
            return None
        return dataclasses.replace(self.variant or Variant(), **arrays)

    def init_cache(self, batch, max_len):
        """An empty KVCache for decoding up to `max_len` tokens (kv_cache.py),
        of the module's KV heads and window.

        batch: the leading axes of x, e.g. () for one sequence.
        """
        return kv_cache.init_kv_cache(
            batch,
            max_len,
            self.w_q.shape[0],
            self.n_heads,
            self.w_q.dtype.name,
            variant=self.variant,
        )

    def decode_step(self, x_t, cache):
        """x_t (..., C), cache -> out_t (..., C), the cache with x_t in it."""
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
from impl_numpy.arrays import from_numpy, to_numpy
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


# run as written, one operation at a time
call = forward
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
