"""Exercise 7, what each framework adds, graded (exercises/grade.py calls
`GRADERS`): JAX's vmap over the heads, jit with n_heads static, grad and an
nnx.Module;
PyTorch's nn.Module with its weights as parameters and autograd. Outputs
are held to the float64 oracle, gradients to the float64 hand-written
backward (impl_numpy/backward.py), within float32's tolerance; each failure
is a cause in the framework's words, the rows it explains under it.
"""

from __future__ import annotations

import ast
import inspect
import textwrap

import numpy as np

from impl_numpy.backward import multi_head_attention_backward
from shared.reference import reference_multi_head

WEIGHTS = ("w_q", "w_k", "w_v", "w_o")


def calls(function, names: tuple[str, ...]) -> bool:
    """Whether `function`'s source names one of `names` (an attribute or a
    name: jax.vmap, vmap, .backward)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in names:
            return True
        if isinstance(node, ast.Name) and node.id in names:
            return True
    return False


def expected(problem):
    """The oracle's out and the hand-written backward's weight gradients."""
    x, (w_q, w_k, w_v, w_o), H, d_out = problem
    out, _ = reference_multi_head(x, w_q, w_k, w_v, w_o, H)
    grads = multi_head_attention_backward(x, w_q, w_k, w_v, w_o, H, d_out)
    return out, [grads[name] for name in WEIGHTS]


def compared(close, got, want, what: str, fold: str) -> list[str]:
    why = close(got, want, what)
    return [fold + why] if why else []


def grade_jax(module, backend, problem, close, fold: str) -> list[str]:
    import jax

    x, weights, H, d_out = problem
    out, grads = expected(problem)
    args = [backend.from_numpy(a, "float32") for a in (x, *weights)]
    d = backend.from_numpy(d_out, "float32")
    failures = []
    rows = compared(
        close, backend.to_numpy(module.multi_head_attention(*args, H)), out,
        "multi_head_attention: out", fold,
    )  # fmt: skip
    if not calls(module.multi_head_attention, ("vmap",)):
        failures.append(
            "steps 3 to 7 are not mapped over the heads: the exercise asks for "
            "jax.vmap(one_head) over the head axis of q, k and v"
        )
    failures += (["multi_head_attention is not the oracle's"] if rows else []) + rows
    f = module.compiled()
    if not hasattr(f, "lower"):
        failures.append("compiled() returns no jax.jit function: wrap it in jax.jit")
    else:
        try:
            got = f(*args, H)
        except (TypeError, jax.errors.ConcretizationTypeError):
            failures.append(
                "jit traces n_heads, and a traced value cannot give a shape: "
                "mark it static (jax.jit's static_argnames)"
            )
        else:
            rows = compared(close, backend.to_numpy(got), out, "jitted: out", fold)
            failures += ["the jitted function is not the oracle's"] if rows else []
            failures += rows
    got = module.weight_gradients(*args, H, d)
    if not calls(module.weight_gradients, ("grad", "value_and_grad", "vjp")):
        failures.append("weight_gradients is to ask JAX: jax.grad of a scalar loss")
    rows = []
    for name, g, e in zip(WEIGHTS, got, grads, strict=False):
        rows += compared(close, backend.to_numpy(g), e, f"d_{name}", fold)
    if rows or len(got) != 4:
        failures.append(
            "the gradients are not sum(out * d_out)'s with respect to w_q, w_k, "
            "w_v, w_o (argnums=(0, 1, 2, 3) of a loss of the four weights)"
        )
    return failures + rows + nnx_layer(module, backend, problem, close, fold)


def nnx_layer(module, backend, problem, close, fold: str) -> list[str]:
    """The JAX layer: an nnx.Module with the four weights as nnx.Param,
    and nnx.grad through it."""
    from flax import nnx

    x, weights, H, d_out = problem
    out, grads = expected(problem)
    layer = module.CausalSelfAttention(x.shape[-1], H, rngs=nnx.Rngs(0))
    found = sorted(p[0] for p, _ in nnx.to_flat_state(nnx.state(layer, nnx.Param)))
    if found != sorted(WEIGHTS):
        return [
            f"the layer's parameters are {found}: w_q, w_k, w_v, w_o are to be "
            "nnx.Param (a plain array attribute is not one)"
        ]
    for name, w in zip(WEIGHTS, weights, strict=True):
        getattr(layer, name)[...] = backend.from_numpy(w, "float32")
    tx, d = (backend.from_numpy(a, "float32") for a in (x, d_out))
    rows = compared(close, backend.to_numpy(layer(tx)), out, "layer: out", fold)
    got = nnx.grad(lambda m: (m(tx) * d).sum())(layer)
    for name, e in zip(WEIGHTS, grads, strict=True):
        rows += compared(close, backend.to_numpy(got[name][...]), e, f"d_{name}", fold)
    return (["the nnx layer is not the oracle's"] if rows else []) + rows


def grade_torch(module, backend, problem, close, fold: str) -> list[str]:
    import torch

    x, weights, H, d_out = problem
    out, grads = expected(problem)
    C = x.shape[-1]
    layer = module.CausalSelfAttention(C, H)
    if not isinstance(layer, torch.nn.Module):
        return ["CausalSelfAttention is not an nn.Module: subclass torch.nn.Module"]
    found = dict(layer.named_parameters())
    if sorted(found) != sorted(WEIGHTS):
        return [
            f"the layer's parameters are {sorted(found)}: w_q, w_k, w_v, w_o are "
            "to be nn.Parameter (a plain tensor attribute is not one)"
        ]
    with torch.no_grad():
        for name, w in zip(WEIGHTS, weights, strict=True):
            found[name].copy_(backend.from_numpy(w, "float32"))
    tx = backend.from_numpy(x, "float32")
    failures = []
    rows = compared(close, backend.to_numpy(layer(tx)).astype(float), out, "out", fold)
    failures += (["the layer's forward is not the oracle's"] if rows else []) + rows
    batched = backend.from_numpy(np.stack([x, x[::-1]]), "float32")
    try:
        got = backend.to_numpy(layer(batched).detach())
        want = np.stack([out, reference_multi_head(x[::-1], *weights, H)[0]])
        rows = compared(close, got, want, "batched out", fold)
    except Exception as error:
        rows = [f"{fold}batched x raised {type(error).__name__}: {error}"]
    failures += (["forward breaks on x (B, T, C)"] if rows else []) + rows
    d = backend.from_numpy(d_out, "float32")
    first = [backend.to_numpy(g).copy() for g in module.weight_gradients(layer, tx, d)]
    second = [backend.to_numpy(g) for g in module.weight_gradients(layer, tx, d)]
    if not calls(module.weight_gradients, ("backward", "grad")):
        failures.append("weight_gradients is to ask autograd: .backward() or "
                        "torch.autograd.grad")  # fmt: skip
    rows = []
    for name, g, e in zip(WEIGHTS, first, grads, strict=False):
        rows += compared(close, g, e, f"d_{name}", fold)
    if rows:
        failures.append("the gradients are not sum(out * d_out)'s: backward of "
                        "that scalar, then each parameter's .grad")  # fmt: skip
    elif any(close(g, e, "") for g, e in zip(second, grads, strict=False)):
        failures.append(
            "a second call doubles the gradients: .grad accumulates, clear it "
            "(module.zero_grad()) before backward"
        )
    return failures + rows


GRADERS = {"jax": grade_jax, "torch": grade_torch}
"""Exercise 7 exists where the framework adds something: not in NumPy."""
