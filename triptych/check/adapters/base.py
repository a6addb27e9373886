"""What every adapter shares (`Adapter`): the inputs at its level in the
dtype under test, the oracle's truth on them, the call (under jax.jit for
JAX), the result as float64 NumPy (`Outcome`), and gradients by the
framework's autodiff; and the name of a function's mask parameter
(`mask_parameter`), which every kind of adapter reads.
"""

from __future__ import annotations

import contextlib
import inspect
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
from triptych.common.backends import load_backend

MASK_NAMES = ("mask", "attn_mask", "attention_mask")


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


def mask_parameter(function) -> str | None:
    """The name of `function`'s mask parameter (MASK_NAMES), or None."""
    try:
        names = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return None
    return next((n for n in MASK_NAMES if n in names), None)
