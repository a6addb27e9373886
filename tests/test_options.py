"""Every option is tested away from its default (issue 28).

Why: a reviewer wrote 42 one-line mutants of impl_torch/ and impl_jax/, and 3
real bugs survived, each because an option was only ever tested at its
default value: a keyword of a kernel whose gradient was tested for one
setting only, and a training hyper-parameter that no test varied (Adam's
defaults here are torch's and optax's own, so a setting lost on its way to
torch.optim.Adam or optax.adam changes nothing at them). Some mutants were
killed only by a test file named after another module.

So every keyword with a default of every public function is listed here with
the tests that call it with another value and check the result (against the
float64 oracle, or the NumPy twin in float64), and these tests fail when one
is missing. The functions: the names in each impl_*/__init__.py's __all__
(the classes' __init__, __call__ and public methods), and every public name
of the modules that are not re-exported (SUBMODULES), the JAX `_jit` twins
among them. Adam's settings (lr, b1, b2, eps) in the training modules have
no default in their signatures: TrainConfig's are theirs.

The signatures are read from the source with `ast`, so that every tox env
checks every package (tox -e numpy has neither torch nor jax; Triton, which
impl_torch/kernel.py imports, is in tox -e kernels only); where a package is
importable, `inspect.signature` must find the same keywords.

To register a keyword: add "module.function:keyword" to REGISTRY (module as
it is defined, e.g. impl_torch.kernel, impl_jax.attention; a method as
Class.method) with the node ids of its tests, e.g.
"tests/test_kv_cache.py::test_init_kv_cache_is_empty", in the file named after
the module where there is one. Each test's source (with its decorators and
the same file's top-level helpers it names) must contain the keyword and the
function's name (a method's class name will do). A keyword that cannot take
another value meaningfully goes in EXCUSED instead, with one line of why.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import inspect
import re
from pathlib import Path

import pytest

from shared.train import TrainConfig

# It reads every package's signatures from its source (ast), which mutmut
# rewrites: the mutation runs leave it out (it checks the tests' registry, not
# what the code computes; docs/mutation.md)
pytestmark = pytest.mark.reads_source

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("impl_numpy", "impl_torch", "impl_jax")
SUBMODULES = ("kernel", "train", "train_flax", "sharded", "module")
"""Modules whose every public function counts, re-exported or not."""
METHODS = ("__init__", "__call__")
"""The dunder methods that take a caller's options."""
TRAINING = ("train", "train_flax")
ADAM_SETTINGS = ("lr", "b1", "b2", "eps")
"""Parameters of the training modules whose default is TrainConfig's."""

# The tests of each module's options (see the docstring). Most pass every
# keyword of their function at once, so that each one dropped, or swapped for
# another, changes a number the oracle pins.
_ATTENTION = "tests/test_backend.py::test_{}_takes_every_option_away_from_its_default"
SINGLE = _ATTENTION.format("single_head")
MULTI = _ATTENTION.format("multi_head")
MODULE = _ATTENTION.format("the_module")
FROM_NUMPY = "tests/test_backend.py::test_from_numpy_casts_to_the_dtype_asked"
SINGLE_BIASES = "tests/test_biases.py::test_single_head_with_biases_equals_the_oracle"
KEY_PADDING = "tests/test_numerics.py::test_key_padding_combines_with_causal"
BACKWARD = (
    "tests/test_backward.py::test_backward_takes_every_option_away_from_its_default"
)
BLOCKWISE = (
    "tests/test_blockwise.py::test_blockwise_takes_every_option_away_from_its_default"
)
BLOCKWISE_SCALE = "tests/test_blockwise.py::test_scale_false_divides_by_nothing"
MULTI_BLOCKWISE = (
    "tests/test_blockwise.py::"
    "test_multi_head_blockwise_takes_every_option_away_from_its_default"
)
DECODE = (
    "tests/test_kv_cache.py::test_decoding_takes_every_option_away_from_its_default"
)
SHARDED = "tests/test_sharded.py::test_every_option_away_from_its_default_reaches_every_device"
SHARDED_SCALE = (
    "tests/test_sharded.py::test_numpy_simulation_equals_the_oracle_in_every_case"
)
TRAIN = (
    "tests/test_train.py::"
    "test_adam_with_every_setting_away_from_its_default_follows_adam_by_hand"
)
KERNELS = (
    "tests/test_kernels.py::test_every_option_away_from_its_default_equals_the_oracle"
)
KERNEL_GRADIENTS = (
    "tests/test_{}_kernel.py::"
    "test_gradients_with_every_option_away_from_its_default_equal_the_oracles"
)
KERNEL_VARIANTS = "tests/test_kernels.py::test_gqa_window_and_softcap_equal_the_oracle"
KERNEL_WINDOW = (
    "tests/test_kernels.py::test_a_window_visits_only_the_key_blocks_it_reaches"
)
KERNEL_VARIANT_GRADIENTS = (
    "tests/test_{}_kernel.py::"
    "test_gradients_with_gqa_a_window_and_a_softcap_equal_the_naive_attentions"
)
KERNEL_CASES = (  # block_size, causal; a key mask; scale=False (see _kernel_registry)
    "tests/test_kernels.py::test_flash_equals_the_oracle",
    "tests/test_kernels.py::test_fully_masked_rows_give_a_zero_output_and_lse_minus_inf",
    "tests/test_kernels.py::test_scale_false_divides_by_nothing",
)
NUMPY_MODULE = "tests/test_numpy_module.py::test_a_{}"
JAX_JITS = {
    "attention": "tests/test_jax_fused.py::"
    "test_the_jitted_attention_takes_every_option_away_from_its_default",
    "backward": "tests/test_jax_backward.py::"
    "test_the_jitted_backward_takes_every_option_away_from_its_default",
    "blockwise": "tests/test_jax_blockwise.py::"
    "test_the_jitted_blockwise_and_decode_take_every_option_away_from_their_default",
}
JAX_BLOCKWISE = JAX_JITS["blockwise"]
TORCH_MODULE = (
    "tests/test_torch_layers.py::"
    "test_the_torch_module_takes_every_option_away_from_its_default"
)
FLAX_MODULE = (
    "tests/test_jax_layers.py::"
    "test_the_flax_module_takes_every_option_away_from_its_default"
)

BIASES = ("biases",)
"""The biases go as one dict (b_q, b_k, b_v, b_o) by that keyword."""

# The variants of modern attention (docs/variants.md, issue 27): one Variant
VARIANTS = ("variant",)
CORE_VARIANTS = ("variant",)
_VARIANT_TESTS = "tests/test_variants.py::test_{}"
EACH_VARIANT = _VARIANT_TESTS.format("each_variant_equals_the_oracle")
HEAD_DIM = _VARIANT_TESTS.format("head_dim_other_than_c_over_h")
BLOCKWISE_VARIANTS = _VARIANT_TESTS.format(
    "blockwise_with_each_variant_equals_the_oracle"
)
CORE_VARIANT_TEST = _VARIANT_TESTS.format(
    "blockwise_core_takes_every_variant_away_from_its_default"
)
DECODE_VARIANTS = _VARIANT_TESTS.format(
    "decoding_with_each_variant_equals_the_full_pass_at_every_step"
)
JAX_VARIANTS = (
    "tests/test_jax_variants.py::"
    "test_the_jitted_variants_take_every_option_away_from_its_default"
)


MODULE_VARIANTS = _VARIANT_TESTS.format(
    "the_module_takes_every_variant_away_from_its_default"
)
MODULE_VARIANT_SETTINGS = ("variant", "sinks", "qk_norm")
MODULE_VARIANT_ARRAYS = ("variant",)


def _variant_registry(p):
    """The variants' keywords of a backend (the package `p`): each with the
    test of every variant, head_dim with its own."""
    found = {}
    for module, function, test in (
        ("attention", "multi_head_attention", EACH_VARIANT),
        ("blockwise", "multi_head_blockwise_attention", BLOCKWISE_VARIANTS),
        ("kv_cache", "decode_step", DECODE_VARIANTS),
    ):
        found |= _each(f"{p}.{module}.{function}", VARIANTS, test, HEAD_DIM)
    found |= _each(
        f"{p}.blockwise.blockwise_attention", CORE_VARIANTS, CORE_VARIANT_TEST
    )
    found |= _each(f"{p}.kv_cache.init_kv_cache", VARIANTS, DECODE_VARIANTS, HEAD_DIM)
    module = f"{p}.module.CausalSelfAttention"
    found |= _each(f"{module}.__init__", MODULE_VARIANT_SETTINGS, MODULE_VARIANTS)
    found |= _each(f"{module}.from_weights", MODULE_VARIANT_ARRAYS, MODULE_VARIANTS)
    return found


def _each(prefix, keywords, *tests):
    """{prefix:keyword: [tests]} for each keyword."""
    return {f"{prefix}:{keyword}": list(tests) for keyword in keywords}


def _backend_registry(p):
    """The keywords every backend has, for the package `p`."""
    call = "forward" if p == "impl_torch" else "__call__"  # the module's forward
    return {
        f"{p}.arrays.from_numpy:dtype": [FROM_NUMPY],
        f"{p}.attention.key_padding_mask:multi_head": [KEY_PADDING],
        f"{p}.attention.single_head_attention:mask": [
            SINGLE,
            SINGLE_BIASES,
            KEY_PADDING,
        ],
        f"{p}.attention.single_head_attention:scale": [SINGLE],
        **_each(f"{p}.attention.single_head_attention", BIASES, SINGLE, SINGLE_BIASES),
        f"{p}.attention.multi_head_attention:mask": [MULTI, KEY_PADDING],
        **_each(f"{p}.attention.multi_head_attention", ["scale", *BIASES], MULTI),
        **_each(
            f"{p}.backward.single_head_attention_backward",
            ["mask", "scale", *BIASES],
            BACKWARD,
        ),
        **_each(
            f"{p}.backward.multi_head_attention_backward",
            ["mask", "scale", *BIASES],
            BACKWARD,
        ),
        **_each(
            f"{p}.blockwise.blockwise_attention",
            ["block_size", "causal", "scale", "visit"],
            BLOCKWISE,
        ),
        **_each(
            f"{p}.blockwise.multi_head_blockwise_attention",
            ["block_size", "causal", "scale", *BIASES],
            MULTI_BLOCKWISE,
        ),
        f"{p}.kv_cache.init_kv_cache:dtype": [DECODE],
        **_each(f"{p}.kv_cache.decode_step", ["scale", *BIASES], DECODE),
        **_each(
            f"{p}.module.CausalSelfAttention.from_weights", ["scale", *BIASES], MODULE
        ),
        f"{p}.module.CausalSelfAttention.{call}:mask": [MODULE],
        f"{p}.sharded.shard_sequence:key_padding": [SHARDED],
        **_each(f"{p}.sharded.ring_attention", ["scale", *BIASES], SHARDED),
        **_each(f"{p}.sharded.head_parallel_attention", ["scale", *BIASES], SHARDED),
        **_each(f"{p}.train.make_optimizer", ADAM_SETTINGS, TRAIN),
    }


def _kernel_registry(p, twin):
    """The keywords of a kernel module's flash_attention and
    multi_head_flash_attention, or (`twin`) of their _jit twins (JAX only)."""
    single = "flash_attention_jit" if twin else "flash_attention"
    gradients = KERNEL_GRADIENTS.format(p.removeprefix("impl_"))
    options = ("mask", "block_size", "causal", "scale", "interpret")
    found = _each(f"{p}.kernel.{single}", options, KERNELS, gradients)
    # the multi-head form passes flash_attention's settings on (**settings)
    found |= _each(
        f"{p}.kernel.multi_head_{single}", ["mask", *BIASES], KERNELS, gradients
    )
    # the variant (docs/variants.md): against the oracle (run_flash and
    # run_multi_flash call JAX's twins, which trace the functions themselves),
    # the gradients and the window's visits of flash_attention itself
    found |= _each(f"{p}.kernel.{single}", VARIANTS, KERNEL_VARIANTS)
    found |= _each(f"{p}.kernel.multi_head_{single}", VARIANTS, KERNEL_VARIANTS)
    if not twin:
        variant_gradients = KERNEL_VARIANT_GRADIENTS.format(p.removeprefix("impl_"))
        found[f"{p}.kernel.{single}:variant"] += [variant_gradients, KERNEL_WINDOW]
    # tests/test_kernels.py's run_flash calls torch's function, JAX's twin
    if twin or p == "impl_torch":
        flash_equals_the_oracle, fully_masked_rows, scale_false = KERNEL_CASES
        for keyword, test in (
            ("block_size", flash_equals_the_oracle),
            ("causal", flash_equals_the_oracle),
            ("mask", fully_masked_rows),
            ("scale", scale_false),
        ):
            found[f"{p}.kernel.{single}:{keyword}"].append(test)
    return found


REGISTRY: dict[str, list[str]] = {
    **_backend_registry("impl_numpy"),
    **_backend_registry("impl_torch"),
    **_backend_registry("impl_jax"),
    **_variant_registry("impl_numpy"),
    **_variant_registry("impl_torch"),
    **_variant_registry("impl_jax"),
    **{
        f"impl_jax.{module}.{function}_jit:{keyword}": [JAX_VARIANTS]
        for module, function in (
            ("attention", "multi_head_attention"),
            ("blockwise", "multi_head_blockwise_attention"),
            ("kv_cache", "decode_step"),
        )
        for keyword in VARIANTS
    },
    **_each("impl_jax.blockwise.blockwise_attention_jit", CORE_VARIANTS, JAX_VARIANTS),
    # NumPy (an entry here replaces the one above: the same tests, and more)
    "impl_numpy.blockwise.blockwise_attention:block_size": [BLOCKWISE, BLOCKWISE_SCALE],
    "impl_numpy.blockwise.blockwise_attention:scale": [BLOCKWISE, BLOCKWISE_SCALE],
    "impl_numpy.sharded.ring_attention:scale": [SHARDED, SHARDED_SCALE],
    "impl_numpy.sharded.head_parallel_attention:scale": [SHARDED, SHARDED_SCALE],
    "impl_numpy.module.CausalSelfAttention.__init__:bias": [
        NUMPY_MODULE.format("module_built_with_every_option_away_from_its_default"),
        NUMPY_MODULE.format(
            "new_module_has_no_biases_unless_asked_and_then_zeros_in_its_dtype"
        ),
    ],
    **_each(
        "impl_numpy.module.CausalSelfAttention.__init__",
        ["scale"],
        NUMPY_MODULE.format("module_built_with_every_option_away_from_its_default"),
    ),
    **_each(
        "impl_numpy.module.CausalSelfAttention.__init__",
        ["seed", "dtype"],
        NUMPY_MODULE.format("module_built_with_every_option_away_from_its_default"),
        NUMPY_MODULE.format("new_module_draws_n_0_1_over_c_weights_from_its_seed"),
    ),
    # torch
    "impl_torch.arrays.from_numpy:dtype": [
        FROM_NUMPY,
        "tests/test_torch_arrays.py::test_from_numpy_takes_a_device",
    ],
    "impl_torch.arrays.from_numpy:device": [
        "tests/test_torch_arrays.py::test_from_numpy_takes_a_device"
    ],
    "impl_torch.attention.causal_mask:device": [
        "tests/test_torch_numerics.py::test_causal_mask_takes_a_device"
    ],
    "impl_torch.blockwise.blockwise_attention:block_size": [
        BLOCKWISE,
        BLOCKWISE_SCALE,
    ],
    "impl_torch.blockwise.blockwise_attention:scale": [BLOCKWISE, BLOCKWISE_SCALE],
    "impl_torch.kv_cache.init_kv_cache:device": [
        "tests/test_torch_blockwise.py::test_init_kv_cache_takes_a_device"
    ],
    **_each(
        "impl_torch.module.CausalSelfAttention.__init__",
        ["bias", "scale", "device", "dtype"],
        TORCH_MODULE,
    ),
    "impl_torch.module.CausalSelfAttention.from_weights:device": [TORCH_MODULE],
    "impl_torch.module.CausalSelfAttention.from_layer:device": [TORCH_MODULE],
    **{
        f"impl_torch.sharded.{function}:group": [SHARDED]
        for function in (
            "shard_sequence",
            "unshard_sequence",
            "ring_attention",
            "head_parallel_attention",
        )
    },
    "impl_torch.train.train_step:loss_fn": [
        "tests/test_torch_train.py::test_train_step_steps_on_the_loss_fn_it_is_given"
    ],
    **_kernel_registry("impl_torch", twin=False),
    # JAX: the _jit twins, the flax module, the Pallas kernel, flax's training
    "impl_jax.attention.key_padding_mask_jit:multi_head": [JAX_JITS["attention"]],
    **_each(
        "impl_jax.attention.single_head_attention_jit",
        ["mask", "scale", *BIASES],
        JAX_JITS["attention"],
    ),
    **_each(
        "impl_jax.attention.multi_head_attention_jit",
        ["mask", "scale", *BIASES],
        JAX_JITS["attention"],
    ),
    **_each(
        "impl_jax.backward.single_head_attention_backward_jit",
        ["mask", "scale", *BIASES],
        JAX_JITS["backward"],
    ),
    **_each(
        "impl_jax.backward.multi_head_attention_backward_jit",
        ["mask", "scale", *BIASES],
        JAX_JITS["backward"],
    ),
    **_each(
        "impl_jax.blockwise.blockwise_attention_jit",
        ["block_size", "causal", "scale", "visit"],
        JAX_BLOCKWISE,
    ),
    **_each(
        "impl_jax.blockwise.multi_head_blockwise_attention_jit",
        ["block_size", "causal", "scale", *BIASES],
        JAX_BLOCKWISE,
    ),
    **_each("impl_jax.kv_cache.decode_step_jit", ["scale", *BIASES], JAX_BLOCKWISE),
    **_each(
        "impl_jax.module.CausalSelfAttention.__init__",
        ["bias", "scale", "param_dtype"],
        FLAX_MODULE,
    ),
    **_each("impl_jax.sharded.ring_attention_jit", ["scale", *BIASES], SHARDED),
    **_each(
        "impl_jax.sharded.head_parallel_attention_jit", ["scale", *BIASES], SHARDED
    ),
    **_kernel_registry("impl_jax", twin=False),
    **_kernel_registry("impl_jax", twin=True),
    "impl_jax.kernel.matmul:transpose_b": [
        "tests/test_jax_kernel.py::test_matmul_transposes_b_when_asked"
    ],
    **_each(
        "impl_jax.train_flax.make_optimizer",
        ADAM_SETTINGS,
        "tests/test_jax_train.py::"
        "test_flax_adam_with_every_setting_away_from_its_default_follows_adam_by_hand",
    ),
}

EXCUSED: dict[str, str] = {}
"""Keywords no test can set to another value meaningfully: "key": "why"."""


# Reading the signatures ---------------------------------------------------------


def _defaults(node: ast.FunctionDef) -> list[str]:
    """The parameters of a def that have a default."""
    args = node.args
    positional = args.posonlyargs + args.args
    with_default = positional[len(positional) - len(args.defaults) :]
    keyword_only = [
        a
        for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
        if d is not None
    ]
    return [a.arg for a in (*with_default, *keyword_only)]


def _parameters(node: ast.FunctionDef) -> list[str]:
    args = node.args
    return [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]


@functools.cache
def _functions_in(module: str) -> dict[str, ast.FunctionDef]:
    """{qualified name: def} of a module's public functions, the methods of
    its public classes (public ones and METHODS), and its public names bound
    to a call on one of its functions (`f_jit = jax.jit(f, ...)`: f's def)."""
    tree = ast.parse((ROOT / (module.replace(".", "/") + ".py")).read_text())
    defs = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    found = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            found[node.name] = node
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            for method in node.body:
                if isinstance(method, ast.FunctionDef) and (
                    not method.name.startswith("_") or method.name in METHODS
                ):
                    found[f"{node.name}.{method.name}"] = method
        elif (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and node.value.args
            and isinstance(node.value.args[0], ast.Name)
            and node.value.args[0].id in defs
        ):
            for target in node.targets:
                if isinstance(target, ast.Name) and not target.id.startswith("_"):
                    found[target.id] = defs[node.value.args[0].id]
    return found


@functools.cache
def _exported(package: str) -> dict[str, str]:
    """{name in __all__: the module it is imported from} of a package."""
    tree = ast.parse((ROOT / package / "__init__.py").read_text())
    where, names = {}, []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            where |= {alias.asname or alias.name: node.module for alias in node.names}
        elif isinstance(node, ast.Assign) and any(
            getattr(target, "id", None) == "__all__" for target in node.targets
        ):
            names = ast.literal_eval(node.value)
    return {name: where[name] for name in names}


def _wanted(package: str) -> dict[str, set[str] | None]:
    """{module: the top-level names that count, or None for every public one}."""
    wanted: dict[str, set[str] | None] = {}
    for name, module in _exported(package).items():
        if wanted.get(module, set()) is not None:
            wanted.setdefault(module, set()).add(name)
    for stem in SUBMODULES:
        if (ROOT / package / f"{stem}.py").exists():
            wanted[f"{package}.{stem}"] = None
    return wanted


def _keys(module: str, qualified: str, defaulted, parameters) -> list[str]:
    keys = [f"{module}.{qualified}:{name}" for name in defaulted]
    if module.rpartition(".")[2] in TRAINING:
        keys += [f"{module}.{qualified}:{n}" for n in ADAM_SETTINGS if n in parameters]
    return keys


@functools.cache
def keywords_by_source() -> frozenset[str]:
    """Every "module.function:keyword" of the three packages, read with ast."""
    found = []
    for package in PACKAGES:
        for module, names in _wanted(package).items():
            for qualified, node in _functions_in(module).items():
                if names is None or qualified.split(".")[0] in names:
                    found += _keys(
                        module, qualified, _defaults(node), _parameters(node)
                    )
    return frozenset(found)


def _callables(owner):
    """(qualified name, function) of a module's or a class's members."""
    for name, member in vars(owner).items():
        if isinstance(member, classmethod | staticmethod):
            member = member.__func__
        if callable(member):
            yield name, member


def keywords_by_import(modules) -> frozenset[str]:
    """The same keywords as keywords_by_source, for the modules given (their
    packages' __all__ names among them), read with inspect.signature."""
    found = []
    for module_name in modules:
        module = importlib.import_module(module_name)
        package = importlib.import_module(module_name.partition(".")[0])
        exported = {
            name
            for name in package.__all__
            if getattr(getattr(package, name), "__module__", None) == module_name
        }
        every = module_name.rpartition(".")[2] in SUBMODULES
        for name, member in _callables(module):
            mine = getattr(member, "__module__", None) == module_name
            if name.startswith("_") or not mine or not (every or name in exported):
                continue
            if not inspect.isclass(member):
                found += _signature_keys(module_name, name, member)
                continue
            for method, function in _callables(member):
                if inspect.isfunction(function) and (
                    not method.startswith("_") or method in METHODS
                ):
                    found += _signature_keys(module_name, f"{name}.{method}", function)
    return frozenset(found)


def _signature_keys(module, qualified, function) -> list[str]:
    parameters = inspect.signature(function).parameters.values()
    defaulted = [p.name for p in parameters if p.default is not inspect.Parameter.empty]
    return _keys(module, qualified, defaulted, [p.name for p in parameters])


# Reading the tests --------------------------------------------------------------


@functools.cache
def _top_level(path: str) -> dict[str, str]:
    """{name: source, decorators included} of a test file's top-level defs,
    classes and assignments."""
    text = (ROOT / path).read_text()
    lines = text.splitlines()
    found = {}
    for node in ast.parse(text).body:
        first = min(
            [node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))]
        )
        source = "\n".join(lines[first - 1 : node.end_lineno])
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            found[node.name] = source
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = source
    return found


def _word(name: str, text: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text) is not None


def registered_source(node_id: str) -> str | None:
    """A registered test's source, with that of the same file's top-level names
    it uses (its helpers, its constants); None if no such test is defined."""
    path, _, name = node_id.partition("::")
    if not (ROOT / path).is_file():
        return None
    defined = _top_level(path)
    if not name.startswith("test") or name not in defined:
        return None
    own = defined[name]
    used = [s for n, s in defined.items() if n != name and _word(n, own)]
    return "\n".join([own, *used])


def _registration_problems(key: str, node_id: str) -> str | None:
    """Why `node_id` cannot test `key`, or None."""
    source = registered_source(node_id)
    if source is None:
        return f"{node_id} is not a test function defined in its file"
    qualified, _, keyword = key.partition(":")
    package, _, *names = qualified.split(".")  # names: function, or class, method
    backend_file = re.match(r"tests/test_(numpy|torch|jax)_", node_id)
    if backend_file and package != f"impl_{backend_file.group(1)}":
        return f"{node_id} runs only with {backend_file.group(1)}, not {package}"
    shown = [n for n in names if n not in METHODS]
    if not any(_word(n, source) for n in shown):
        return f"{node_id} never names {' or '.join(shown)}"
    if not _word(keyword, source):
        return f"{node_id} never passes {keyword}"
    return None


# The tests ----------------------------------------------------------------------


def test_every_keyword_with_a_default_has_a_registered_test():
    missing = sorted(keywords_by_source() - REGISTRY.keys() - EXCUSED.keys())
    assert not missing, (
        f"{len(missing)} keywords with a default have no test away from it; "
        "register one (this file's docstring says how): " + ", ".join(missing)
    )


def test_the_registry_names_only_keywords_that_exist():
    found = keywords_by_source()
    stale = sorted((REGISTRY.keys() | EXCUSED.keys()) - found)
    assert not stale, f"no such keyword with a default: {stale}"
    assert not REGISTRY.keys() & EXCUSED.keys()
    assert all(REGISTRY.values()), "a registered keyword names no test"
    for key, why in EXCUSED.items():
        assert why.strip() and "\n" not in why, f"{key}: one line of why"


def test_each_registered_test_exists_and_passes_its_keyword():
    problems = [
        problem
        for key, node_ids in sorted(REGISTRY.items())
        for node_id in node_ids
        if (problem := _registration_problems(key, node_id))
    ]
    assert not problems, "\n".join(problems)


def test_the_registry_check_has_teeth():
    """A test that names neither the function nor the keyword, one that does
    not exist, and one of another backend's file are refused."""
    key = "impl_numpy.blockwise.blockwise_attention:visit"
    assert _registration_problems(key, BLOCKWISE) is None
    assert "never passes visit" in _registration_problems(key, BLOCKWISE_SCALE)
    assert "never names" in _registration_problems(key, FROM_NUMPY)
    assert "not a test function" in _registration_problems(key, BLOCKWISE + "_x")
    assert "runs only with jax" in _registration_problems(key, JAX_BLOCKWISE)
    numbers = keywords_by_source()
    assert "impl_torch.kernel.flash_attention:interpret" in numbers  # by ast
    assert "impl_numpy.train.make_optimizer:lr" in numbers  # TrainConfig's default
    assert "impl_jax.attention.multi_head_attention_jit:mask" in numbers  # a twin
    assert "impl_numpy.attention.attend:scale" not in numbers  # not exported


def test_the_signatures_read_from_the_source_are_the_imported_ones(request):
    """inspect.signature, in every package this session selected (and its
    kernel module where it imports: impl_torch.kernel needs Triton), finds
    the keywords that ast finds."""
    config = request.config
    for name in config.selected_backends:
        package = f"impl_{name}"
        modules = set(_wanted(package))
        if not _imports(f"{package}.kernel"):
            modules.discard(f"{package}.kernel")
        by_source = {k for k in keywords_by_source() if _module_of(k) in modules}
        assert keywords_by_import(sorted(modules)) == by_source, package
    assert config.selected_backends, "no backend selected"


def _imports(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:  # impl_torch.kernel without Triton
        return False
    return True


def _module_of(key: str) -> str:
    """The module of "module.function:keyword" (or "module.Class.method:...")."""
    qualified = key.partition(":")[0]
    (module,) = (
        m for p in PACKAGES for m in _wanted(p) if qualified.startswith(m + ".")
    )
    return module


def test_training_settings_take_their_defaults_from_train_config():
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    assert set(ADAM_SETTINGS) <= defaults.keys()
    assert (defaults["b1"], defaults["b2"], defaults["eps"]) == (0.9, 0.999, 1e-8)


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_has_keywords_to_test(package):
    assert sum(key.startswith(package + ".") for key in keywords_by_source()) > 40
