"""What only the Triton kernel has: torch.autograd through its autograd.Function
equals the gradient of the naive attention, with a key mask too (the lse's cotangent included; a row with nothing to attend gets a
zero gradient), and with GQA, a window and soft-capping; and, in a process
without the interpreter, the kernel (with a window and soft-capping) compiles
for an sm_90 GPU (Hopper: H100, H200) on this CPU, PTX and cubin, while CPU
tensors get one line on how to turn the interpreter on. Collected with
--kernels (tox -e kernels, TRITON_INTERPRET=1)."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import (
    PARAM_NAMES,
    derived_gradient_tolerances,
    random_inputs,
)

import impl_torch
from impl_torch import kernel
from impl_torch.attention import allowed_keys, attend
from impl_torch.variants import repeat_kv, soft_cap
from shared import Variant, assert_close

ROOT = Path(__file__).resolve().parents[1]


def test_multi_head_gradients_equal_the_naive_attentions(dtype):
    x, p = random_inputs(1, (2,), 13, 8)
    d_out = impl_torch.from_numpy(np.random.default_rng(2).standard_normal(x.shape))

    def gradients(attention):
        args = [
            impl_torch.from_numpy(a, dtype).requires_grad_()
            for a in (x, *(p[n] for n in PARAM_NAMES))
        ]
        out, _ = attention(*args, 2)  # 2 heads of D = 4
        return torch.autograd.grad((out * d_out.to(out.dtype)).sum(), args)

    # (torch's blockwise attention works in place, which autograd refuses)
    ours = gradients(functools.partial(kernel.multi_head_flash_attention, block_size=4))
    theirs = gradients(impl_torch.multi_head_attention)
    tolerances = derived_gradient_tolerances("multi", x, p, 2, d_out.numpy(), dtype)
    for name, a, b in zip(("x", *PARAM_NAMES), ours, theirs, strict=True):
        assert_close(a.numpy(), b.numpy(), tolerances[name], f"d loss / d {name}")


@pytest.mark.parametrize("with_lse", [False, True], ids=["out", "out-and-lse"])
def test_gradients_with_a_key_mask_equal_the_naive_attentions(with_lse):
    T = 13
    rng = np.random.default_rng(3)
    d_out = torch.from_numpy(rng.standard_normal((2, T, 4)))
    d_lse = torch.from_numpy(rng.standard_normal((2, T)))
    keep = np.ones((2, T), dtype=bool)
    keep[0, -5:] = False  # padding at the end
    if not with_lse:  # lse is -inf where nothing is attended: no cotangent there
        keep[1, :3] = False  # queries 0 to 2 of item 1 may attend nothing
    mask = torch.from_numpy(keep[:, None, :])  # (2, 1, T)
    qkv = rng.standard_normal((3, 2, T, 4))

    def gradients(attention):
        q, k, v = (torch.from_numpy(a).requires_grad_() for a in qkv)
        out, lse = attention(q, k, v)
        loss = (out * d_out).sum() + ((lse * d_lse).sum() if with_lse else 0.0)
        return torch.autograd.grad(loss, (q, k, v))

    def naive(q, k, v):
        allowed = allowed_keys(T, mask)  # (2, T, T)
        out, _ = attend(q, k, v, allowed)
        scores = torch.where(allowed, q @ k.mT / 2.0, -torch.inf)  # D = 4
        return out, torch.logsumexp(scores, dim=-1)

    ours = gradients(
        lambda q, k, v: kernel.flash_attention(q, k, v, mask, block_size=4)
    )
    theirs = gradients(naive)
    for name, a, b in zip("qkv", ours, theirs, strict=True):
        assert_close(a.numpy(), b.numpy(), "float64", f"d loss / d {name}")
    if not with_lse:  # the rows with nothing to attend: a zero gradient
        np.testing.assert_array_equal(ours[0][1, :3].numpy(), 0.0)


def test_gradients_with_gqa_a_window_and_a_softcap_equal_the_naive_attentions():
    """flash_attention with 4 query heads on 2 KV heads, a window of 3 and a
    soft-cap of 1.5 (docs/variants.md): its backward repeats k and v, sums
    their gradients back over each KV head's queries, masks the window and
    multiplies by soft-capping's slope, 1 - tanh^2."""
    T, window, cap = 9, 3, 1.5
    rng = np.random.default_rng(4)
    q, d_out = (torch.from_numpy(a) for a in rng.standard_normal((2, 1, 4, T, 4)))
    k, v = (torch.from_numpy(a) for a in rng.standard_normal((2, 1, 2, T, 4)))
    d_lse = torch.from_numpy(rng.standard_normal((1, 4, T)))

    def gradients(attention):
        leaves = [a.clone().requires_grad_() for a in (q, k, v)]
        out, lse = attention(*leaves)
        loss = (out * d_out).sum() + (lse * d_lse).sum()
        return torch.autograd.grad(loss, leaves)

    def naive(q, k, v):
        k, v = repeat_kv(k, 2), repeat_kv(v, 2)  # (1, 4, T, 4): head h reads h // 2
        i, j = torch.arange(T)[:, None], torch.arange(T)
        allowed = (j <= i) & (j > i - window)  # (T, T)
        out, _ = attend(q, k, v, allowed, score_mod=lambda s: soft_cap(s, cap))
        scores = soft_cap(q @ k.mT / 2.0, cap).masked_fill(~allowed, -torch.inf)
        return out, torch.logsumexp(scores, dim=-1)  # D = 4: scale 1 / 2

    variant = Variant(n_kv_heads=2, window=window, softcap=cap)
    ours = gradients(
        lambda q, k, v: kernel.flash_attention(q, k, v, block_size=4, variant=variant)
    )
    for name, a, b in zip("qkv", ours, gradients(naive), strict=True):
        assert_close(a.numpy(), b.numpy(), "float64", f"d loss / d {name}")


def test_the_interpreter_setting_is_checked_before_any_launch():
    # this process has the interpreter on: compiling is impossible here
    assert os.environ.get("TRITON_INTERPRET") == "1"
    with pytest.raises(ValueError) as raised:
        kernel.check_triton_runs(False, torch.float32)
    assert str(raised.value) == (
        "interpret=False (or None with CUDA tensors) asks for the compiled kernel, "
        "but Triton's interpreter is on in this process (TRITON_INTERPRET=1 when "
        "Triton was imported): pass interpret=True"
    )


COMPILE = """
import json, warnings
import torch
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from impl_torch import kernel

warnings.simplefilter("ignore")  # Triton's notice of a default to change
pointers = {"inputs": ("*bf16", "*bf16", "*bf16", "*i32")}  # q, k, v, keep
pointers |= {"outputs": ("*bf16", "*fp32")}  # out, lse
scalars = {"T": "i32", "D": "i32", "scale": "fp32", "G": "i32"}
# every branch: causal, a window and soft-capping (None leaves them out)
variants = {"CAUSAL": True, "WINDOW": 128, "SOFTCAP": 50.0}
constexprs = variants | {"BLOCK": 64, "BLOCK_D": 64, "STATS": tl.float32}
signature = pointers | scalars | dict.fromkeys(constexprs, "constexpr")
source = triton.compiler.ASTSource(kernel.flash_kernel, signature, constexprs)
options = {"num_warps": 4, "num_stages": 2}
compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)
found = {"asm": sorted(compiled.asm), "shared": compiled.metadata.shared}
q = torch.ones(5, 4)
try:
    kernel.flash_attention(q, q, q)
except ValueError as error:
    found["error"] = str(error)
print(json.dumps(found))
"""


def test_without_the_interpreter_the_kernel_compiles_for_sm_90_and_cpu_is_refused(
    tmp_path,
):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env |= {"TRITON_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}  # no cache hit
    child = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(COMPILE)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert child.returncode == 0, child.stderr
    found = json.loads(child.stdout)
    assert {"ttir", "ttgir", "llir", "ptx", "cubin"} <= set(found["asm"])
    assert 0 < found["shared"] <= 227 * 1024  # an sm_90 block's shared memory
    assert found["error"] == (
        "Triton's interpreter is off in this process, and Triton runs CPU tensors "
        "only there: set TRITON_INTERPRET=1 before Triton is imported "
        "(TRITON_INTERPRET=1 python ...), or put them on a GPU"
    )


def test_gradients_with_every_option_away_from_its_default_equal_the_oracles():
    """flash_attention with a key mask, block_size=2, causal=False, scale=False
    and interpret=True: the gradients of sum(out * d_out) + sum(lse * d_lse)
    for q, k, v equal the oracle's finite differences entry by entry;
    multi_head_flash_attention with those and every bias, for x, the weights
    and the biases, along random directions (tests/helpers.py; registered in
    tests/test_options.py)."""
    from helpers import (
        assert_directional_derivatives,
        assert_finite_differences,
        flash_options_case,
        multi_head_flash_options_case,
    )

    case = flash_options_case()
    qkv = [torch.from_numpy(a).requires_grad_() for a in (case.q, case.k, case.v)]
    out, lse = kernel.flash_attention(
        *qkv, torch.from_numpy(case.mask), block_size=2, causal=False,
        scale=False, interpret=True,
    )  # fmt: skip
    d_out, d_lse = torch.from_numpy(case.d_out), torch.from_numpy(case.d_lse)
    grads = torch.autograd.grad((out * d_out).sum() + (lse * d_lse).sum(), qkv)
    found = {name: g.numpy() for name, g in zip("qkv", grads, strict=True)}
    assert_finite_differences(found, case.grads, "flash_attention")
    multi = multi_head_flash_options_case()
    leaves = {n: torch.from_numpy(a).requires_grad_() for n, a in multi.arrays.items()}
    out, lse = kernel.multi_head_flash_attention(
        leaves["x"], *(leaves[n] for n in PARAM_NAMES), multi.H,
        torch.from_numpy(multi.mask), block_size=2, causal=False, scale=False,
        interpret=True,
        biases={n: leaves[n] for n in ("b_q", "b_k", "b_v", "b_o")},
    )  # fmt: skip
    d_out, d_lse = torch.from_numpy(multi.d_out), torch.from_numpy(multi.d_lse)
    loss = (out * d_out).sum() + (lse * d_lse).sum()
    grads = torch.autograd.grad(loss, list(leaves.values()))
    found = {name: g.numpy() for name, g in zip(leaves, grads, strict=True)}
    assert_directional_derivatives(found, multi.found, "multi_head_flash_attention")


def test_flash_attention_makes_its_tensors_on_the_inputs_device():
    """The key mask flash_attention makes where none is given is made on q's
    device, not on torch's default device: under a default device of "meta"
    (shapes, no numbers), CPU inputs give CPU outputs equal to the float64
    oracle. (Kills tox -e mutate-torch's `torch.ones(..., device=None)`.)"""
    from shared.reference import reference_single_head

    x, p = random_inputs(7, (2,), 7, 8)
    q, k, v = (impl_torch.from_numpy(x @ p[n]) for n in ("w_q", "w_k", "w_v"))
    with torch.device("meta"):
        out, lse = kernel.flash_attention(q, k, v, block_size=4, interpret=True)
    assert {out.device.type, lse.device.type} == {"cpu"}
    expected, _ = reference_single_head(x, p["w_q"], p["w_k"], p["w_v"])
    assert_close(out.numpy(), expected, "float64", "flash out")


def test_with_the_interpreter_off_interpret_true_says_how_to_turn_it_on(monkeypatch):
    """What a process without TRITON_INTERPRET=1 is told, in this process: the
    kernel as Triton's compiler has it (a JITFunction, not the interpreter's
    InterpretedFunction) refuses interpret=True in one line."""
    monkeypatch.setattr(kernel, "flash_kernel", object())  # not interpreted
    with pytest.raises(ValueError) as raised:
        kernel.check_triton_runs(True, torch.float32)
    assert str(raised.value) == (
        "Triton's interpreter is off in this process, and Triton runs CPU tensors "
        "only there: set TRITON_INTERPRET=1 before Triton is imported "
        "(TRITON_INTERPRET=1 python ...), or put them on a GPU"
    )


def test_bfloat16_in_the_interpreter_says_why_and_what_to_use():
    q = torch.ones(5, 4, dtype=torch.bfloat16)
    with pytest.raises(ValueError) as raised:
        kernel.flash_attention(q, q, q, interpret=True)
    assert str(raised.value) == (
        "bfloat16 does not run in Triton's interpreter (its tl.dot multiplies "
        "bfloat16 bit patterns as integers: triton-lang/triton#11584): use "
        "float16, float32 or float64 on a CPU, or bfloat16 on a GPU"
    )
