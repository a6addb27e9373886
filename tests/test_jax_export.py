"""Jit on CPU, GPU and TPU, as far as a CPU can prove it: every jitted function
of impl_jax exported with jax.export for cpu, cuda and tpu at once, and the CPU
program of that export, called, equal to the eager function. An export needs
no hardware, only each platform's lowering, so this proves that each program
lowers for each platform; it cannot prove what a GPU or a TPU computes
(docs/kernels.md, "Lowered for GPU and TPU from a CPU"; docs/devices.md has the
commands that would).

The Pallas kernel is exported in its interpreter like the rest, and compiled
(interpret=False) for each platform alone: to Mosaic for a TPU, to Triton for a
CUDA GPU. Where a lowering or an export stops, its error is pinned word for
word, so that the day it changes, this file says so."""

from __future__ import annotations

import ast
import functools
import importlib
import pkgutil
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import TINY_TRAIN

import impl_jax
from impl_jax import (
    attention,
    blockwise,
    kernel,
    kv_cache,
    sharded,
    train,
    train_flax,
)
from shared import PRESETS, Variant, assert_close, make_fixture
from shared.train import TrainConfig, make_task

PLATFORMS = ("cpu", "cuda", "tpu")
TINY = PRESETS["tiny"]
H = TINY.n_heads  # 4 heads of D = 8 over C = 32, T = 8
FIXTURE = make_fixture(TINY).astype("float32")
X = jnp.asarray(FIXTURE.x)  # (T, C)
WEIGHTS = tuple(jnp.asarray(FIXTURE.params[n]) for n in ("w_q", "w_k", "w_v", "w_o"))
BLOCK = 4  # two blocks of T = 8, so that the online softmax loops


class Case(NamedTuple):
    """One jitted program: exported as jax.export.export(jitted)(*args,
    **kwargs), run eagerly as eager(*args, **kwargs). exported.call takes the
    args without their ints: the static n_heads, which the export holds."""

    jitted: Any
    eager: Any
    args: tuple
    kwargs: dict


CASES = {}


def case(name):
    """Register a builder of the Case of `name`, "module.attribute" in
    impl_jax: the definition that jits (test_every_jitting_definition_has_a_case)."""

    def register(build):
        CASES[name] = functools.cache(build)  # built once, for the module
        return build

    return register


def jit_case(name):
    """Register a builder of (args, kwargs) for `name`, a "module.f_jit": the
    Case of f_jit, with f eager."""

    def register(build):
        module_name, attribute = name.split(".")
        defining = importlib.import_module(f"impl_jax.{module_name}")
        jitted = getattr(defining, attribute)
        eager = getattr(defining, attribute.removesuffix("_jit"))
        return case(name)(lambda: Case(jitted, eager, *build()))

    return register


def per_head():
    """q, k, v (H, T, D) of the fixture."""
    return tuple(attention.split_heads(X @ w, H) for w in WEIGHTS[:3])


def cotangent():
    """d_out (T, C): a gradient of the output that is not all ones."""
    return jnp.asarray(np.random.default_rng(1).standard_normal(X.shape), X.dtype)


@jit_case("attention.single_head_attention_jit")
def _():
    return (X, *WEIGHTS[:3]), {}


@jit_case("attention.multi_head_attention_jit")
def _():
    return (X, *WEIGHTS, H), {}


@jit_case("attention.attention_entropy_jit")
def _():
    _, weights = attention.multi_head_attention(X, *WEIGHTS, H)  # (H, T, T)
    return (weights,), {}


@jit_case("attention.key_padding_mask_jit")
def _():
    lengths = jnp.asarray([3, 8], jnp.int32)  # (2,): one padded, one full
    return (lengths,), {"T": 8, "multi_head": True}


@jit_case("backward.single_head_attention_backward_jit")
def _():
    return (X, *WEIGHTS[:3], cotangent()), {}


@jit_case("backward.multi_head_attention_backward_jit")
def _():
    return (X, *WEIGHTS, H, cotangent()), {}


@jit_case("blockwise.blockwise_attention_jit")
def _():
    return per_head(), {"block_size": BLOCK}


@jit_case("blockwise.multi_head_blockwise_attention_jit")
def _():
    return (X, *WEIGHTS, H), {"block_size": BLOCK}


@case("blockwise.unmasked_blocks")
def _():
    """The loop blockwise_attention jits on its own: query block 1 of two
    against key block 0, its bounds and B static."""
    q, k, v = per_head()  # (H, T, D)
    q_block = q[:, BLOCK:]  # (H, B, D)
    state = (
        jnp.full(q_block.shape[:-1], -jnp.inf),  # m
        jnp.zeros(q_block.shape[:-1]),  # l
        jnp.zeros_like(q_block),  # acc
    )
    static = dict(i=1, blocks=(0, 1), B=BLOCK, variant=None, visit=None)
    loop = blockwise.unmasked_blocks
    return Case(loop, without_jit(loop), (state, q_block, k, v), static)


@jit_case("kv_cache.decode_step_jit")
def _():
    cache = kv_cache.init_kv_cache((), 8, TINY.d_model, H)
    for t in range(3):  # three tokens in the cache, so that there is a past
        _, cache = kv_cache.decode_step(X[t], cache, *WEIGHTS, H)
    return (X[3], cache, *WEIGHTS, H), {}


@jit_case("tuned.multi_head_tuned_attention_jit")
def _():
    return (X, *WEIGHTS, H), {"block_size": BLOCK}


@case("extras.compiled")
def _():
    from impl_jax import extras, lesson

    return Case(extras.compiled(), lesson.single_head_attention, (X, *WEIGHTS[:3]), {})


def without_jit(function):
    """`function` run eagerly, the jits inside it too."""

    def eager(*args, **kwargs):
        with jax.disable_jit():
            return function(*args, **kwargs)

    return eager


@case("extras.compiled_heads")
def _():
    from impl_jax import extras, lesson

    args = (X, *WEIGHTS, H)  # n_heads static, as compiled_heads declares it
    return Case(extras.compiled_heads(), lesson.multi_head_attention, args, {})


@case("extras.gradient")
def _():
    from impl_jax import extras

    jitted = jax.jit(extras.gradient)  # it jits inside: export the whole
    return Case(jitted, without_jit(extras.gradient), (X, *WEIGHTS[:3]), {})


@case("extras.fused")
def _():
    from impl_jax import extras

    return Case(extras.fused, without_jit(extras.fused), (X, *WEIGHTS[:3]), {})


@case("backend.compiled")
def _():
    from impl_jax import backend, lesson

    jitted = backend.compiled(lesson.single_head_attention)
    return Case(jitted, lesson.single_head_attention, (X, *WEIGHTS[:3]), {})


@jit_case("kernel.flash_attention_jit")
def _():
    return per_head(), {"block_size": BLOCK, "interpret": True}


@jit_case("kernel.multi_head_flash_attention_jit")
def _():
    return (X, *WEIGHTS, H), {"block_size": BLOCK, "interpret": True}


def on_one_device():
    """The mesh of this host's one device, and the fixture's rows and keep as
    shard_sequence lays them out on it. An export is for its mesh's size: run
    on as many devices (exported.nr_devices), here one."""
    mesh = sharded.make_mesh(1)
    rows, keep = sharded.shard_sequence(X, mesh=mesh)  # (Tp, C), (Tp,)
    return mesh, rows, keep


@jit_case("sharded.ring_attention_jit")
def _():
    mesh, rows, keep = on_one_device()
    return (rows, *WEIGHTS, H, keep), {"mesh": mesh}


@jit_case("sharded.head_parallel_attention_jit")
def _():
    mesh, rows, keep = on_one_device()
    return (rows, *WEIGHTS, H, keep), {"mesh": mesh}


# The training tests' model (helpers.TINY_TRAIN): its eager step reuses their programs.
TRAIN = TrainConfig(**TINY_TRAIN)


@functools.cache
def train_task():
    task = make_task(TRAIN)
    return task, train.as_tokens(next(task.batches()))  # (B, T) int32


@case("train.compile_train_step")
def _():
    task, tokens = train_task()
    params = train.init_params(task.params, "float32")
    c = TRAIN
    optimizer, adam = train.make_optimizer(params, c.lr, c.b1, c.b2, c.eps)
    args, kwargs = (
        (params, adam, tokens),
        {"n_heads": c.n_heads, "optimizer": optimizer},
    )
    return Case(train.compile_train_step(), train.train_step, args, kwargs)


# nnx.jit's programs take modules, which jax.export cannot take
# (test_nnx_jit_cannot_be_given_to_jax_export): nnx.split turns the module into
# a graph and a state, and the function of the state that nnx.merge rebuilds
# it in is pure, so jax.jit and jax.export take it; what nnx.jit compiles.


def through_state(graph, method):
    """method(module, *args) as a pure function of the module's state: it
    returns the method's result and the state after (nnx's updates in place)."""

    def pure(state, *args):
        merged = nnx.merge(graph, state, copy=True)  # the state given stays
        return method(merged, *args), nnx.state(merged)

    return pure


def attention_module():
    names = ("w_q", "w_k", "w_v", "w_o")
    return impl_jax.CausalSelfAttention.from_weights(
        *(FIXTURE.params[n] for n in names), H
    )


@case("module.CausalSelfAttention")
def _():
    graph, state = nnx.split(attention_module())
    pure = through_state(graph, lambda m, x: m(x))
    return Case(jax.jit(pure), pure, (state, X), {})


@case("module.CausalSelfAttention.decode_step")
def _():
    m = attention_module()
    cache = m.init_cache((), 8)
    graph, state = nnx.split(m)
    pure = through_state(graph, lambda m, x_t, cache: m.decode_step(x_t, cache))
    return Case(jax.jit(pure), pure, (state, X[0], cache), {})


def flax_model_and_optimizer():
    task, tokens = train_task()
    c = TRAIN
    model = train_flax.AttentionOnlyLM(task.params, c.n_heads, "float32")
    adam = train_flax.make_optimizer(model, c.lr, c.b1, c.b2, c.eps)
    return model, adam, tokens


@case("train_flax.compile_train_step")
def _():
    assert train_flax.compile_train_step().fun is train_flax.train_step
    model, adam, tokens = flax_model_and_optimizer()
    graph, state = nnx.split((model, adam))
    pure = through_state(
        graph, lambda both, tokens: train_flax.train_step(*both, tokens)
    )
    return Case(jax.jit(pure), pure, (state, tokens), {})


def names_a_jit(node):
    """Whether the code of `node` names jax.jit, nnx.jit or a bare jit."""
    return any(
        (isinstance(n, ast.Attribute) and n.attr == "jit")
        or (isinstance(n, ast.Name) and n.id == "jit")
        for n in ast.walk(node)
    )


def definitions_that_jit():
    """ "module.name" of each public top-level function, class or assignment in
    impl_jax whose code names a jit (a call, a decorator, a factory's body)."""
    found = set()
    for path in sorted(Path(impl_jax.__file__).parent.glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            else:
                continue
            if names_a_jit(node):
                found |= {f"{path.stem}.{n}" for n in names if not n.startswith("_")}
    return found


def jitted_attributes():
    """ "module.name" of each public jitted function an impl_jax module defines,
    however it was made (what the source scan could miss)."""
    found = set()
    for info in pkgutil.iter_modules(impl_jax.__path__):
        defining = importlib.import_module(f"impl_jax.{info.name}")
        for name, value in vars(defining).items():
            if (
                isinstance(value, jax.stages.Wrapped)
                and value.__module__ == defining.__name__
                and not name.startswith("_")
            ):
                found.add(f"{info.name}.{name}")
    return found


def test_every_jitting_definition_has_a_case():
    """A new jitted function, or a function that jits, fails here until it is
    exported below; a case whose definition is gone fails too."""
    assert definitions_that_jit() - set(CASES) == set()
    assert jitted_attributes() - set(CASES) == set()
    for name in CASES:
        module_name, *attributes = name.split(".")
        value = importlib.import_module(f"impl_jax.{module_name}")
        for attribute in attributes:
            value = getattr(value, attribute)


def arrays(args):
    """What exported.call takes: the args less the static ints it holds."""
    return tuple(a for a in args if not isinstance(a, int))


def assert_same(got, expected, what):
    """Equal trees; floats within float32's tolerance, the rest exactly."""
    assert jax.tree.structure(got) == jax.tree.structure(expected), what
    leaves = zip(jax.tree.leaves(got), jax.tree.leaves(expected), strict=True)
    for index, (a, b) in enumerate(leaves):
        a, b = np.asarray(a), np.asarray(b)
        if np.issubdtype(b.dtype, np.floating):
            assert_close(a, b, "float32", f"{what}, leaf {index}")
        else:
            np.testing.assert_array_equal(a, b, f"{what}, leaf {index}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_exports_for_cpu_cuda_and_tpu_and_runs_as_eager(name):
    c = CASES[name]()
    exported = jax.export.export(c.jitted, platforms=PLATFORMS)(*c.args, **c.kwargs)
    assert exported.platforms == PLATFORMS
    got = exported.call(*arrays(c.args))  # the program of this host's platform
    expected = c.eager(*c.args, **c.kwargs)
    assert_same(got, expected, f"{name} exported, called on {jax.default_backend()}")


def test_the_nnx_jit_programs_lower_for_cpu_cuda_and_tpu_as_they_are():
    """What the split cases export is nnx.jit's own program: lowered for the
    three at once, it takes the platform as its first argument."""
    module_call = nnx.jit(lambda m, x: m(x))
    model, adam, tokens = flax_model_and_optimizer()
    for traced in (
        module_call.trace(attention_module(), X),
        train_flax.compile_train_step().trace(model, adam, tokens),
    ):
        text = traced.lower(lowering_platforms=PLATFORMS).as_text()
        assert 'jax.global_constant = "_platform_index"' in text


def test_nnx_jit_cannot_be_given_to_jax_export():
    """flax 0.12.8's nnx.jit has trace().lower(), but not the private
    arguments jax.export passes it; hence nnx.split above."""
    with pytest.raises(TypeError) as raised:
        jax.export.export(nnx.jit(lambda m, x: m(x)), platforms=PLATFORMS)(
            attention_module(), X
        )
    assert "got an unexpected keyword argument '_private_parameters'" in str(
        raised.value
    )


# The kernel compiled: interpret=False. A (T, D) = (256, 64) head with 64-row
# blocks: the compiled kernel's tile, four query blocks per head.

HEADS = jax.ShapeDtypeStruct((8, 256, 64), jnp.float32)  # (H, T, D): no data
COMPILED = {"block_size": 64, "interpret": False}
TRITON = "__gpu$xla.gpu.triton"


def lower_compiled(platforms, precision="float32"):
    """flash_attention_jit compiled, lowered for `platforms`; as text."""
    q = jax.ShapeDtypeStruct(HEADS.shape, jnp.dtype(precision))
    traced = kernel.flash_attention_jit.trace(q, q, q, **COMPILED)
    return traced.lower(lowering_platforms=platforms).as_text()


@pytest.mark.parametrize("precision", ["bfloat16", "float32"])
def test_the_compiled_kernel_exports_for_a_tpu_as_one_mosaic_call(precision):
    q = jax.ShapeDtypeStruct(HEADS.shape, jnp.dtype(precision))
    exported = jax.export.export(kernel.flash_attention_jit, platforms=("tpu",))(
        q, q, q, **COMPILED
    )
    assert exported.platforms == ("tpu",)
    text = exported.mlir_module()
    assert text.count("stablehlo.custom_call @tpu_custom_call") == 1
    assert TRITON not in text


@pytest.mark.parametrize("precision", ["bfloat16", "float32"])
def test_the_compiled_kernel_lowers_for_a_cuda_gpu_as_one_triton_call(precision):
    text = lower_compiled(("cuda",), precision)
    assert text.count(TRITON) == 1
    assert "tpu_custom_call" not in text
    assert "grid_x = 8 : i32, grid_y = 4 : i32" in text  # (H, T / B) programs


def test_jax_export_refuses_triton_unless_told_it_may():
    """jax.export keeps only custom calls whose format JAX promises to keep
    stable; Triton's is not one (its IR changes with jaxlib), so a cuda export
    holds only where the exporting and the running jaxlib are the same."""
    q = HEADS
    export = jax.export.export(kernel.flash_attention_jit, platforms=("cuda",))
    with pytest.raises(ValueError) as raised:
        export(q, q, q, **COMPILED)
    assert str(raised.value).startswith(
        "Cannot serialize code with custom calls whose targets have no "
        "compatibility guarantees."
    )
    allow = [jax.export.DisabledSafetyCheck.custom_call(TRITON)]
    exported = jax.export.export(
        kernel.flash_attention_jit, platforms=("cuda",), disabled_checks=allow
    )(q, q, q, **COMPILED)
    assert exported.platforms == ("cuda",)
    assert exported.mlir_module().count(TRITON) == 1


def test_the_multi_head_compiled_kernel_lowers_for_each_accelerator():
    """With the variants the kernel takes: GQA (its KV heads read in place),
    a window (a loop from the first block it reaches) and soft-capping."""
    x = jax.ShapeDtypeStruct((2, 256, 512), jnp.bfloat16)  # (B, T, C), H = 8
    w = jax.ShapeDtypeStruct((512, 512), jnp.bfloat16)
    w_kv = jax.ShapeDtypeStruct((512, 128), jnp.bfloat16)  # 2 KV heads of D = 64
    variant = Variant(n_kv_heads=2, window=100, softcap=50.0)
    traced = kernel.multi_head_flash_attention_jit.trace(
        x, w, w_kv, w_kv, w, 8, **COMPILED, variant=variant
    )
    cuda = traced.lower(lowering_platforms=("cuda",)).as_text()
    tpu = traced.lower(lowering_platforms=("tpu",)).as_text()
    assert cuda.count(TRITON) == 1
    assert tpu.count("tpu_custom_call") == 1


@pytest.mark.parametrize(
    ("platforms", "precision", "error", "message"),
    [
        # Pallas compiles for accelerators only; the interpreter is the CPU's
        (
            ("cpu",),
            "float32",
            ValueError,
            "Only interpret mode is supported on CPU backend.",
        ),
        # JAX lowers each branch of lax.platform_dependent for every platform
        # of the module, so the Triton call meets the TPU's lowering
        (
            ("cuda", "tpu"),
            "float32",
            ValueError,
            "Compiler params for platform gpu cannot be used for tpu lowering.",
        ),
        # Mosaic's matmul sums in float32, bfloat16, float8 or ints, never in
        # float64 (the kernel's float64 statistics); Triton takes float64
        (("tpu",), "float64", NotImplementedError, "float64"),
    ],
    ids=["cpu", "cuda-and-tpu-at-once", "float64-on-tpu"],
)
def test_where_the_compiled_kernel_does_not_lower(platforms, precision, error, message):
    with pytest.raises(error) as raised:
        lower_compiled(platforms, precision)
    assert str(raised.value) == message
