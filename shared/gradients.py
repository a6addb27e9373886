"""Running a backend's backward pass on NumPy inputs: what `triptych grad` and
the gradient tests share. A backend is passed in as a module (see
`shared.protocol.Backend`), so this imports NumPy only.

Every gradient is of L = sum(out * d_out) for one seeded standard-normal
d_out, the same for every backend.
"""

from __future__ import annotations

import numpy as np

from shared.config import Preset
from shared.protocol import Backend

FORMS = ("single", "multi")
GRAD_NAMES = {
    "single": ("x", "w_q", "w_k", "w_v"),
    "multi": ("x", "w_q", "w_k", "w_v", "w_o"),
}
"""The gradients of each form, in the order its backward returns them."""
D_OUT_SEED = 1234
"""d_out's generator is seeded with this plus the preset's seed."""


def upstream_gradient(preset: Preset) -> np.ndarray:
    """The seeded d_out of a preset: float64 standard normal, the shape of x.

    Both forms give out the shape of x here (the fixture's w_q, w_k, w_v are
    (C, C), so D = C for the single head too).
    """
    rng = np.random.default_rng(D_OUT_SEED + preset.seed)
    return rng.standard_normal((*preset.batch, preset.T, preset.d_model))


def backend_gradients(
    backend: Backend,
    form: str,
    x,
    params,
    n_heads,
    d_out,
    dtype,
    mask=None,
    *,
    scale=True,
    jitted=False,
) -> dict[str, np.ndarray]:
    """One backend's gradients on NumPy inputs cast to `dtype`, as NumPy arrays.

    Args:
        backend: impl_numpy, impl_torch or impl_jax.
        form: "single" (x, w_q, w_k, w_v) or "multi" (also w_o and n_heads).
        x: (..., T, C) float64 inputs.
        params: "w_q", "w_k", "w_v", "w_o" float64 projections.
        n_heads: H, for the multi-head form.
        d_out: float64 upstream gradient, the shape of out.
        dtype: the dtype to compute in, by name.
        mask, scale: as for the forward functions (mask a NumPy bool array).
        jitted: call the backend's `_jit` twin where it has one (JAX): one
            compile of the whole backward per shape, where eager JAX compiles
            each of its operations.

    Returns:
        The gradients by name, in the order of GRAD_NAMES[form].
    """
    cast = {name: backend.from_numpy(a, dtype) for name, a in params.items()}
    x_in, d_out_in = backend.from_numpy(x, dtype), backend.from_numpy(d_out, dtype)
    mask_in = None if mask is None else backend.from_numpy(mask)

    def function(name):
        return getattr(backend, f"{name}_jit", None) if jitted else None

    if form == "single":
        single = function("single_head_attention_backward")
        single = single or backend.single_head_attention_backward
        grads = single(
            x_in, cast["w_q"], cast["w_k"], cast["w_v"], d_out_in, mask_in, scale=scale
        )
    else:
        multi = function("multi_head_attention_backward")
        multi = multi or backend.multi_head_attention_backward
        w_q, w_k, w_v, w_o = (cast[k] for k in ("w_q", "w_k", "w_v", "w_o"))
        grads = multi(x_in, w_q, w_k, w_v, w_o, n_heads, d_out_in, mask_in, scale=scale)
    return {name: backend.to_numpy(grads[name]) for name in GRAD_NAMES[form]}
