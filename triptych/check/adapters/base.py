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

from shared import registry
from triptych.check.problems import (
    W_NAMES,
    Inputs,
    qkv_of,
    single_head_mask,
    truth_of_projections,
    truth_of_qkv,
)
from triptych.common.backends import hooks, load_backend

MASK_NAMES = ("mask", "attn_mask", "attention_mask")
JIT_OPTIONS = {"xla_backend_optimization_level": 0}
"""XLA's options for the check's jax.jit by default: its CPU backend (LLVM)
without optimisation, which compiles in about 60% of the time. On our
backend it computes the bits of XLA's defaults in four dtypes at ordinary
magnitudes (tests/test_jax_check.py), not at bfloat16's top: there XLA's
optimised code overflows (NaN at scores of 1e37) where this does not, so
--profile strict, which asks for those magnitudes, compiles with XLA's
defaults (`Adapter.jit_options` None)."""


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
        batch_ranks: the numbers of batch axes x may have (0: (T, C), 1:
            (B, T, C), 2: (B1, B2, T, C)), found by `probe` or given.
        batch_found: how batch_ranks was found ("probed", "given", or ""
            before either).
        differentiable: the inputs gradients are taken for.
    """

    level = "x"
    one_head = False
    differentiable: tuple[str, ...] = ("x", *W_NAMES)

    def __init__(self, target, framework, signature, *, takes_mask, detail=""):
        self.target, self.framework, self.signature = target, framework, signature
        self.takes_mask, self.detail = takes_mask, detail
        self.fixed: tuple[int, int] | None = None
        self.batch_ranks: tuple[int, ...] = (0, 1, 2)
        self.batch_found = ""
        self.batch_broken = ""  # runs on (T, C), raises where batched: probe.py
        self.backend = load_backend(framework)
        self.hooks = hooks(framework)  # impl_<framework>/backend.py
        self.jit = True  # a tracing compile step's only (JAX): see `invoke`
        self.judged: dict = {}  # sizes -> dtype: see properties.judged
        self.judged_now: set = set()  # the dtypes `judge` gave this property
        self.compiled: dict = {}
        self.untraced: set = set()  # see `untraceable`
        self.refused: dict = {}  # see properties.search.refuses
        self.jit_options: dict | None = JIT_OPTIONS  # None: XLA's defaults
        self.variant = None  # a triptych.check.variant.Variant: its keywords too
        self.unchecked: list[str] = []  # variant options it takes, not given

    @property
    def several_heads(self) -> bool:
        return not self.one_head and (self.fixed is None or self.fixed[1] > 1)

    @property
    def max_batch(self) -> int:
        return max(self.batch_ranks)

    def describe(self) -> str:
        """'multi, numpy, x (..., T, C)': the signature, the framework, and
        the batch axes it takes (found by the probe, or "as --batch says")."""
        detail = f" ({self.detail})" if self.detail else ""
        given = {"given": " as --batch says", "promised": " as its docstring says"}
        given = given.get(self.batch_found, "")
        notes = [f"drawn with {self.sizes()}"] * bool(self.sizes())
        if self.unchecked:  # written for a variant, checked without it
            notes.append(f"its variant unchecked: no {', '.join(self.unchecked)}")
        how = f"{self.signature}{detail}, {self.framework}, {self.layout()}{given}"
        return "; ".join([how, *notes])

    def sizes(self) -> str:
        """Which sizes its problems are drawn at beyond the catalogue's, and
        why: the variant's (`Variant.sizes`), and one head narrower than x."""
        found = [self.variant.sizes()] if self.variant is not None else []
        if self.one_head and self.fixed is None:
            found.append("one head narrower than x (sqrt(C) != sqrt(D))")
        return "; ".join(filter(None, found))

    def layout(self) -> str:
        """The first input as it is given: 'x (B, T, C)', 'q (..., H, T, D)'."""
        name, rest = "x", "T, C"
        if self.level == "qkv":
            name, rest = "q", "T, H, D" if self.signature == "qkv-thd" else "H, T, D"
        if set(self.batch_ranks) == {0, 1, 2}:
            return f"{name} (..., {rest})"
        batch = {0: "", 1: "B, ", 2: "B1, B2, "}
        return f"{name} " + " or ".join(f"({batch[r]}{rest})" for r in self.batch_ranks)

    # What the implementation is given, and the truth on it

    def arrays(self, inputs: Inputs, dtype: str) -> dict[str, np.ndarray]:
        """The inputs at this level as the implementation holds them in
        `dtype` (float64 values)."""
        if self.level == "qkv":
            return qkv_of(inputs, dtype)
        rounded = inputs.rounded(dtype)
        names = W_NAMES[:3] if self.one_head else W_NAMES
        return {"x": rounded.x, **{n: rounded.w[n] for n in names}, **rounded.extra}

    def mask_argument(self, inputs: Inputs) -> np.ndarray | None:
        """The mask (NumPy) this signature is given for the problem's: the
        mask itself (no head axis for one head), None for causal only."""
        if inputs.mask is None:
            return None
        if not self.takes_mask:
            raise ValueError("a mask for a signature that takes none")
        return single_head_mask(inputs.mask) if self.one_head else inputs.mask

    def mask_in(self, inputs: Inputs, dtype: str = "float64"):
        """`mask_argument` as the framework's array (None stays None); a
        float mask (an additive one, -inf where a key is masked) in `dtype`,
        the dtype under test, with -inf as its lowest finite number."""
        mask = self.mask_argument(inputs)
        if mask is None:
            return None
        mask = np.array(mask)
        if mask.dtype != bool:
            from shared.dtypes import np_dtype
            from shared.hostile import largest

            mask = np.nan_to_num(mask, neginf=-largest(dtype)).astype(np_dtype(dtype))
        if self.traced:  # jax.jit takes NumPy: no conversion compiled per shape
            return mask
        return self.backend.from_numpy(mask)

    def truth(self, inputs: Inputs, dtype: str) -> Outcome:
        """The float64 oracle on what the implementation is given in `dtype`."""
        out, weights = self.truth_of(self.arrays(inputs, dtype), inputs.mask, inputs.H)
        return Outcome(out, weights, "float64")

    def truth_of(self, arrays, mask, H):
        """The oracle's (out, weights) on `arrays` of this level."""
        if self.level == "qkv":
            return truth_of_qkv(arrays["q"], arrays["k"], arrays["v"], mask)
        w = {n: arrays.get(n) for n in W_NAMES}
        extra = {n: a for n, a in arrays.items() if n not in ("x", *W_NAMES)}
        inputs = Inputs(arrays["x"], w, H, mask, self.variant, extra)
        return truth_of_projections(inputs, self.one_head)

    # Calling it

    def run(self, inputs: Inputs, dtype: str) -> Outcome:
        """The implementation on `inputs` in `dtype`."""
        arrays = {
            name: self.framework_array(a, dtype)
            for name, a in self.arrays(inputs, dtype).items()
        }
        with quiet():
            result = self.invoke(arrays, self.mask_in(inputs, dtype), inputs.H, dtype)
        return self.outcome(result, inputs)

    def framework_array(self, array: np.ndarray, dtype: str):
        """A NumPy array in the framework, in `dtype`: cast here first, so that
        JAX has no conversion to compile for each new shape."""
        from shared.dtypes import np_dtype

        return self.backend.from_numpy(np.asarray(array).astype(np_dtype(dtype)), dtype)

    def untraceable(self, key) -> None:
        """A call (`key`: its dtype and what else keys the jit) that raised
        under jax.jit and not eagerly: that call eagerly from then on (JAX
        refuses some dtypes under jit only: float16 matmuls with a float32
        result on a CPU); every call, after three such."""
        self.untraced.add(key)
        if len(self.untraced) >= 3:
            self.jit = False

    @property
    def traced(self) -> bool:
        """Whether calls go through the framework's compile step: one that
        traces once per new shape (jax.jit), not --eager, traceable."""
        compiler = registry.get(self.framework).compiler
        return self.jit and compiler is not None and compiler.traces

    def eager_mask(self, mask):
        """A mask for an eager call: NumPy (as `mask_in` gives it to jax.jit)
        as the framework's array."""
        return self.backend.from_numpy(mask) if isinstance(mask, np.ndarray) else mask

    def call(self, arrays: dict, mask, H: int, dtype: str):
        """The target on framework `arrays` of this level and the framework's
        mask (`mask_in`); its raw result."""
        raise NotImplementedError

    def invoke(self, arrays: dict, mask, H: int, dtype: str):
        """`call`, under jax.jit for JAX: one compile per new shape instead of
        one per operation. A call that cannot be traced runs eagerly
        (`untraceable`; its own error, if it raises eagerly too)."""
        if not self.traced:
            return self.call(arrays, self.eager_mask(mask), H, dtype)
        names = tuple(arrays)
        key = (names, H, dtype)
        if key not in self.compiled:

            def traced(values, mask):
                return self.call(dict(zip(names, values, strict=True)), mask, H, dtype)

            self.compiled[key] = self.hooks.compiled(
                traced, compiler_options=self.jit_options
            )
        if key in self.untraced:
            return self.call(arrays, self.eager_mask(mask), H, dtype)
        try:
            return self.compiled[key](tuple(arrays.values()), mask)
        except Exception:
            result = self.call(arrays, self.eager_mask(mask), H, dtype)
            self.untraceable(key)
            return result

    def outcome(self, result, inputs: Inputs) -> Outcome:
        """The raw result as an Outcome (weights None where not comparable)."""
        weights = None
        if isinstance(result, tuple | list) and result:
            result, *rest = result  # out first; the weights where shaped so
            *batch, T, _ = inputs.x.shape
            weights = next(
                (w for w in rest if getattr(w, "shape", ())[-2:] == (T, T)), None
            )
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
            return first(self.call({**arrays, **changed}, mask, H, "float64"))

        return f

    def gradients(self, inputs: Inputs, d_out: np.ndarray) -> dict[str, np.ndarray]:
        """d/d(each differentiable input) of sum(out * d_out), float64, by the
        framework's autodiff (in JAX, under jax.jit once per shape where it
        traces).

        Raises:
            NoAutodiffError: a framework without autodiff (NumPy).
        """
        if registry.get(self.framework).autodiff is None:
            raise NoAutodiffError
        b = self.backend
        arrays = {
            n: b.from_numpy(a, "float64")
            for n, a in self.arrays(inputs, "float64").items()
        }
        mask = self.mask_in(inputs, "float64")
        d_out_in = b.from_numpy(d_out, "float64")
        with quiet():
            grads = self.autodiff_gradients(arrays, mask, inputs.H, d_out_in)
        return {
            n: np.zeros(arrays[n].shape)
            if g is None
            else np.asarray(b.to_numpy(g), dtype=np.float64)
            for n, g in grads.items()
        }

    def autodiff_gradients(self, arrays, mask, H, d_out):
        """The framework's gradients of sum(out * d_out) for the
        differentiable arrays (its `gradients` hook): where calls are traced,
        compiled once per shape (the other arrays, the mask and d_out
        arguments), else, or where that cannot be traced, eagerly."""
        names = self.differentiable
        rest = {n: a for n, a in arrays.items() if n not in names}
        leaves = {n: arrays[n] for n in names}

        def gradients(leaves, rest, mask, d_out):
            def f(**changed):
                return first(self.call({**rest, **changed}, mask, H, "float64"))

            return self.hooks.gradients(f, leaves, d_out)

        key = ("gradients", H, tuple(arrays))
        if self.traced and not isinstance(self, FunctionOnly):
            if key not in self.compiled:
                self.compiled[key] = self.hooks.compiled(
                    gradients, compiler_options=self.jit_options
                )
            if key not in self.untraced:
                try:
                    return self.compiled[key](leaves, rest, mask, d_out)
                except Exception:
                    self.untraceable(key)
        f = self.function(arrays, self.eager_mask(mask), H)
        return self.hooks.gradients(f, leaves, d_out)


class FunctionOnly:
    """A mixin: gradients through `function` only (a module, whose weights
    are loaded into it eagerly), never through a cached jit of `call`."""


def first(result):
    """out of a result that is out, or a tuple (out, weights, ...)."""
    return result[0] if isinstance(result, tuple | list) else result


def mask_parameter(function) -> str | None:
    """The name of `function`'s mask parameter (MASK_NAMES), or None."""
    try:
        names = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return None
    return next((n for n in MASK_NAMES if n in names), None)
