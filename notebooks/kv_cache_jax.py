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
# # kv_cache.py: decoding with a cache, in JAX
#
# Decoding with a KV cache in JAX: one token at a time, equal to the full pass.
#
# Earlier keys and values never change, so they wait in a cache: each new token
# is projected alone, its key and value written at the next free position, and
# its one query attends to the filled positions (docs/blockwise.md, section 7).
# JAX arrays are immutable: a new cache comes back, and `decode_step_jit` donates
# the one given, so that XLA may write in place: do not use it again. A write
# past max_len is dropped without a word, as `.at[].set` drops it.
# Shapes as in attention.py, and L = max_len cached positions.
#
# The first code cell installs the project where it is missing (in Colab). The
# functions are `impl_jax/kv_cache.py`'s, as the page shows them: edit one and
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

from impl_jax.arrays import FRAMEWORK, require_x64_for
from impl_jax.attention import attend, multi_head
from impl_jax.kv_cache import KVCache, cached_variant
from impl_jax.variants import cache_slot
from shared.validation.kv_cache import check_decode_step, check_kv_cache_sizes

# %%
def init_kv_cache(batch, max_len, d_model, n_heads, dtype="float32", *, variant=None):
    """An empty KVCache: k, v zeros (*batch, H, max_len, D), length 0, for x of
    shape (*batch, T, d_model) in `dtype` (a name) and n_heads = H; with a
    variant, H_kv heads of its head_dim, and W slots for its window."""
    sizes = check_kv_cache_sizes(batch, max_len, d_model, n_heads, variant)
    shape = (*batch, sizes.H, sizes.T, sizes.D)  # (..., H_kv, L, D)
    require_x64_for(dtype)  # JAX only: float64 needs x64 (docs/contract.md)
    k = jnp.zeros(shape, jnp.dtype(dtype))
    v = jnp.zeros(shape, jnp.dtype(dtype))
    return KVCache(k, v, jnp.zeros((), int))  # int64, or int32 without x64

# %%
def decode_step(
    x_t, cache, w_q, w_k, w_v, w_o, n_heads, *, scale=True, biases=None, variant=None
):
    """The output of x_t (..., C), the token at position cache.length, and the
    cache with it, length + 1: attention.multi_head around a core that writes
    the cache and attends it. w_q, w_k, w_v, w_o, n_heads, scale, biases and
    the variant as for `multi_head_attention` (its positions (...,): x_t's
    rotary position, by default cache.length). With a window, a cache of
    L >= W slots rolls: position p in slot p % L, decoding past L
    (docs/variants.md). out_t (..., C) is row cache.length of the full causal
    pass (docs/contract.md). A full cache does not raise."""
    dims, variant = check_decode_step(
        x_t, cache, w_q, w_k, w_v, w_o, n_heads, biases=biases, variant=variant,
        framework=FRAMEWORK,
    )  # fmt: skip
    L = dims.T
    window = None if variant is None else variant.window
    if variant is not None:  # x_t's rotary position, one row: (..., 1)
        position = cache.length if variant.positions is None else variant.positions
        variant = dataclasses.replace(variant, positions=position[..., None])

    def core(q, k, v):  # q (..., H, 1, D), k, v (..., H_kv, 1, D): x_t's
        # cache 1. write the new key and value at position `length` (a new array)
        slot = cache.length if window is None else cache_slot(cache.length, L, window)
        k_cache = cache.k.at[..., slot, :].set(k[..., 0, :])  # (..., H_kv, L, D)
        v_cache = cache.v.at[..., slot, :].set(v[..., 0, :])  # (..., H_kv, L, D)
        # cache 2. attend the positions filled so far, the new one included
        filled = jnp.arange(L) <= cache.length  # (L,): not the future
        keys, values, score_mod, sinks = k_cache, v_cache, None, None
        if variant is not None:  # GQA, the window, ALiBi, soft-capping: variants.py
            keys, values, filled, score_mod = cached_variant(
                k_cache, v_cache, cache.length, dims.H, variant
            )
            sinks = variant.sinks
        out, _ = attend(q, keys, values, filled, scale, score_mod, sinks)  # steps 3-7
        return out.astype(q.dtype), KVCache(k_cache, v_cache, cache.length + 1)

    x = x_t[..., None, :]  # (..., 1, C): one row
    out, cache = multi_head(x, (w_q, w_k, w_v, w_o), dims, core, biases, variant)
    return out[..., 0, :], cache  # (..., C)

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
cache = init_kv_cache((2,), 6, 8, 2)  # batch (2,), 6 slots, C = 8, H = 2
# traced once, compiled as one program; n_heads decides shapes: static
jax.clear_caches()  # an edit above is traced anew
step = jax.jit(decode_step, static_argnames="n_heads")
rows = []
for t in range(6):  # one token at a time, as a model generates
    out_t, cache = step(f32(x[:, t]), cache, *map(f32, w), 2)
    rows.append(f64(out_t))  # (B, C)
out = np.stack(rows, axis=-2)  # (B, T, C)
expected, _ = reference_multi_head(x, *w, 2)  # the full causal pass
distance = np.abs(out - expected).max()
print(f"token by token, two heads: max |out - oracle| = {distance:.2e}")
assert np.allclose(out, expected, atol=ATOL, rtol=RTOL)

# %% [markdown]
# Try it: attend every slot, not only the filled ones (the `filled` mask), rerun:
# the early tokens see empty slots. Exercise 6 (exercises/README.md) asks for one
# step.
