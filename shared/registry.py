"""The registry of backends: what the tooling knows of each framework, said
once, as data. Besides impl_*, this is the one place that names a framework;
triptych, tools and the tests ask it (docs/architecture.md, "Adding a
backend"). Nothing here imports a framework: what runs code (synchronise,
compile, set threads, ...) is each backend's own, in impl_<name>/backend.py.

    from shared import registry

    registry.names()                    # ('numpy', 'torch', 'jax'): --backends
    registry.get("torch").arrays.word   # 'a torch tensor'
    registry.register(Framework(...))   # a backend of the tests' own
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Arrays:
    """A framework's arrays.

    Attributes:
        word: one of them in a message: "a torch tensor".
        roots: the top-level modules their types come from:
            type(array).__module__ of a JAX array is "jaxlib...".
        computes_on: the other frameworks whose arrays it takes as its own
            (JAX takes NumPy arrays, as jax.numpy does).
        numpy: its arrays are NumPy's: the reference, whose arrays every
            other backend converts from and to (from_numpy, to_numpy).
        heads_first: its fused attention takes q, k, v as (..., H, T, D);
            False: (..., T, H, D), as jax.nn.dot_product_attention does.
    """

    word: str
    roots: tuple[str, ...]
    computes_on: tuple[str, ...] = ()
    numpy: bool = False
    heads_first: bool = True


@dataclass(frozen=True)
class Install:
    """What installs a framework and what a run records of it.

    Attributes:
        extra: what `install_command(extra)` installs.
        requires: the packages impl_<name> imports, found without importing.
        versions: the packages whose versions a run records.
        shown: the packages of its one-line version ("jax 0.10.2, flax 0.12.8").
    """

    extra: str
    requires: tuple[str, ...]
    versions: tuple[str, ...]
    shown: tuple[str, ...]


def install_command(extra: str) -> str:
    """The pip command that adds `extra`'s packages to this project installed
    from its clone (README.md), run at the clone's root: through
    constraints.txt, the versions the suite is tested with (an unpinned torch
    would bring a CUDA build of several GB)."""
    return f'pip install -c constraints.txt -e ".[{extra}]"'


@dataclass(frozen=True)
class Compiler:
    """A framework's compile step (impl_<name>/backend.py `compile`).

    Attributes:
        name: "torch.compile", "jax.jit".
        traces: it traces a pure function once per new shape: `triptych
            check` calls a target through it (one compile per shape rather
            than per operation), and a per-shape test run selects less.
        slow: a compile takes tens of seconds (inductor): `bench --quick`
            leaves its compiled modes out.
        forget: the call that empties what it traced ("jax.clear_caches()"),
            or "": a notebook's run cell makes it, so that a function it calls
            that a cell above redefines is traced anew, not the kept trace.
    """

    name: str
    traces: bool = False
    slow: bool = False
    forget: str = ""


ONE_PROCESS, PROCESS_GROUP, ONE_CHILD = "one process", "process group", "one child"
"""The engines `triptych shard` runs a backend's sharded attention with."""


@dataclass(frozen=True)
class Framework:
    """One backend's static facts: what the tooling needs, without importing it.

    Attributes:
        name: what --backends takes; its package is impl_<name>.
        title: its name in prose and headings: "PyTorch".
        arrays, install: `Arrays`, `Install`.
        compiler: its compile step, or None (NumPy runs as written).
        autodiff: how it differentiates ("torch.autograd"), or None: its
            gradients are by hand.
        gradients: how `triptych grad` says it computes gradients.
        eager_note: why its first eager run is slow, or None.
        devices: where it computes: "cpu", "cuda".
        own_threads: it has a thread count of its own (torch.set_num_threads);
            NumPy's BLAS follows threadpoolctl, XLA the process's cores.
        kernel: the language of its impl_<name>/kernel.py, or None.
        kernel_env: (variable, value) its kernel tests need set on a CPU.
        shard_engine: how `triptych shard` runs it: ONE_PROCESS plays every
            device, PROCESS_GROUP (a process per device, torch.distributed),
            ONE_CHILD (a child process with N devices, jax.sharding).
        profiler: what `bench --breakdown` profiles it with: "lines" (its
            Python lines, sampled), "torch.profiler", "jax.profiler".
        color: its colour in the figures.
    """

    name: str
    title: str
    arrays: Arrays
    install: Install
    compiler: Compiler | None = None
    autodiff: str | None = None
    gradients: str = "by hand"
    eager_note: str | None = None
    devices: tuple[str, ...] = ("cpu",)
    own_threads: bool = False
    kernel: str | None = None
    kernel_env: tuple[tuple[str, str], ...] = ()
    shard_engine: str = ONE_PROCESS
    profiler: str = "lines"
    color: str = "tab:gray"

    @property
    def package(self) -> str:
        """impl_<name>: the package that computes with it."""
        return f"impl_{self.name}"


BUILT_IN = (
    Framework(
        name="numpy",
        title="NumPy",
        arrays=Arrays("a NumPy array", ("numpy",), numpy=True),
        install=Install("numpy", ("numpy",), ("numpy",), ("numpy",)),
        color="tab:blue",
    ),
    Framework(
        name="torch",
        title="PyTorch",
        arrays=Arrays("a torch tensor", ("torch",)),
        install=Install("torch", ("torch",), ("torch",), ("torch",)),
        compiler=Compiler("torch.compile", slow=True),
        autodiff="torch.autograd",
        gradients="torch.autograd",
        devices=("cpu", "cuda"),
        own_threads=True,
        kernel="Triton",
        kernel_env=(("TRITON_INTERPRET", "1"),),  # Triton's interpreter on a CPU
        shard_engine=PROCESS_GROUP,
        profiler="torch.profiler",
        color="tab:orange",
    ),
    Framework(
        name="jax",
        title="JAX",
        arrays=Arrays("a JAX array", ("jax", "jaxlib"), ("numpy",), heads_first=False),
        install=Install(
            "jax", ("jax", "flax"), ("jax", "jaxlib", "flax"), ("jax", "flax")
        ),
        compiler=Compiler("jax.jit", traces=True, forget="jax.clear_caches()"),
        autodiff="jax.vjp",
        gradients="jax.vjp, each operation compiling on its first use",
        eager_note="eagerly: XLA compiles each operation on its first use",
        devices=("cpu", "cuda"),
        kernel="Pallas",
        shard_engine=ONE_CHILD,
        profiler="jax.profiler",
        color="tab:green",
    ),
)
"""The built-in backends, in the order of every table, figure and list."""

_REGISTERED: dict[str, Framework] = {f.name: f for f in BUILT_IN}


def register(framework: Framework) -> Framework:
    """Add a backend after the others (its impl_<name> and backend.py must
    import); return it.

    Raises:
        ValueError: a backend of that name is registered already.
    """
    if framework.name in _REGISTERED:
        raise ValueError(f"backend {framework.name!r} is registered already")
    _REGISTERED[framework.name] = framework
    return framework


def unregister(name: str) -> None:
    """Remove a backend `register` added (the built-in ones stay)."""
    if any(f.name == name for f in BUILT_IN):
        raise ValueError(f"backend {name!r} is built in")
    _REGISTERED.pop(name, None)


def frameworks() -> tuple[Framework, ...]:
    """Every registered backend, in order."""
    return tuple(_REGISTERED.values())


def names() -> tuple[str, ...]:
    """The backends' names, in order: the one list of them."""
    return tuple(_REGISTERED)


def get(name: str) -> Framework:
    """The backend `name`.

    Raises:
        ValueError: no backend of that name.
    """
    try:
        return _REGISTERED[name]
    except KeyError:
        raise ValueError(
            f"unknown backend {name!r}; choose from {', '.join(_REGISTERED)}"
        ) from None


def reference() -> Framework:
    """The backend whose arrays are NumPy's: the others' reference."""
    return next(f for f in _REGISTERED.values() if f.arrays.numpy)


def owner_of_module(module: str) -> str | None:
    """The backend whose packages `module` (a dotted name) belongs to: the
    root of "flax.nnx" is one of JAX's packages; None: no backend's."""
    root = module.partition(".")[0]
    return next(
        (f.name for f in _REGISTERED.values() if root in f.install.requires), None
    )


def framework_of(array) -> str | None:
    """The backend whose array `array` is (a JAX tracer and a torch fake
    tensor included), else None. Reads only the array's type."""
    root = type(array).__module__.partition(".")[0]
    return next((f.name for f in _REGISTERED.values() if root in f.arrays.roots), None)


def conversion(name: str, have: str, want: str) -> str:
    """The expression that turns the array called `name`, of backend `have`,
    into backend `want`'s: through NumPy, the arrays every backend reads.

    >>> conversion("x", "jax", "torch")
    'impl_torch.from_numpy(impl_jax.to_numpy(x))'
    """
    if not get(have).arrays.numpy:
        name = f"{get(have).package}.to_numpy({name})"
    if not get(want).arrays.numpy:
        name = f"{get(want).package}.from_numpy({name})"
    return name
