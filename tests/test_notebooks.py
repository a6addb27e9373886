"""notebooks/: every notebook is what notebooks/build.py makes of its sources
(no drift) and a valid nbformat 4.5 document; the lesson's import nothing of
the project (they run in Colab without it), the other chapters' first cell
installs it where it is missing and does nothing where it is importable; and
each runs top to bottom in a Jupyter kernel of its framework's env
(nbclient; one kernel for the file, its namespace emptied before each
notebook: a kernel's start, torch's or JAX's import, cost 3 to 4 s a
notebook; a kernel of its own where a cell before the imports fixes what
the framework fixes early, JAX's devices), printing the distances to the
oracle that the library and shared/reference.py give for the same problem;
the edit each chapter's closing words suggest ("Try it") makes its notebook
fail."""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import json
import math
import subprocess
import sys
import warnings
from pathlib import Path

import nbformat
import numpy as np
import pytest
from helpers import name_of
from jupyter_core.utils import run_sync
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from shared import registry
from shared.reference import reference_multi_head, reference_single_head
from shared.train import TrainConfig, make_task
from shared.variants import Rotary, Variant

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
sys.path.insert(0, str(NOTEBOOKS))
import build  # noqa: E402 (notebooks/build.py)

PROJECT = ("shared", "impl_numpy", "impl_torch", "impl_jax", "triptych")


def code_of(path: Path) -> str:
    document = json.loads(path.read_text())
    cells = [c for c in document["cells"] if c["cell_type"] == "code"]
    return "\n\n".join("".join(c["source"]) for c in cells) + "\n"


def run(code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
    )


@pytest.mark.neutral
def test_the_notebooks_are_built_from_their_sources_and_valid(capsys):
    assert build.main(["--check"]) == 0, capsys.readouterr().out
    for framework in build.ARRAYS:
        for slug in (s for s in build.SLUGS if framework in build.frameworks_of(s)):
            path = NOTEBOOKS / f"{slug}_{framework}.ipynb"
            nbformat.validate(nbformat.read(path, as_version=4))
            document = json.loads(path.read_text())
            assert (document["nbformat"], document["nbformat_minor"]) == (4, 5)
            assert document["metadata"]["kernelspec"]["name"] == "python3"
            ids = [c["id"] for c in document["cells"]]
            assert len(ids) == len(set(ids))
            for cell in document["cells"]:
                assert cell["cell_type"] in ("markdown", "code")
                assert isinstance(cell["source"], list) and cell["metadata"] == {}
                if cell["cell_type"] == "code":
                    assert cell["outputs"] == [] and cell["execution_count"] is None
            text = (NOTEBOOKS / f"{slug}_{framework}.py").read_text()
            assert "formats: ipynb,py:percent" in text  # jupytext's pairing
        tree = ast.parse(code_of(NOTEBOOKS / f"lesson_{framework}.ipynb"))
        imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import)
                    for a in n.names]  # fmt: skip
        imported += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not [m for m in imported if m.split(".")[0] in PROJECT]


@pytest.mark.neutral
def test_the_setup_cell_installs_the_project_where_it_is_missing(monkeypatch):
    ran = []
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(subprocess, "run", lambda command, check: ran.append(command))
    for slug in build.SLUGS[1:]:  # the lesson needs nothing of the project
        framework = build.frameworks_of(slug)[0]  # NumPy's, or the chapter's own
        document = json.loads((NOTEBOOKS / f"{slug}_{framework}.ipynb").read_text())
        setup = "".join(
            next(c for c in document["cells"] if c["cell_type"] == "code")["source"]
        )
        exec(setup, {})
    package = f"attention-triptych @ git+https://github.com/{build.REPOSITORY}"
    assert ran == [[sys.executable, "-m", "pip", "install", "-q", package]] * (
        len(build.SLUGS) - 1
    )


def problem():
    """notebooks/chapters.py's problem: x (B, T, C), the four (C, C) weights
    and one head's three (C, D), float64."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 6, 8))
    w = [rng.standard_normal((8, 8)) / math.sqrt(8) for _ in range(4)]
    return rng, x, w, [a[:, :4] for a in w[:3]]


def distance(backend, got, expected) -> str:
    found = np.asarray(backend.to_numpy(got), np.float64)
    return f"{np.abs(found - expected).max():.2e}"


def lesson_lines(backend, module, f32, call):
    _, x, w, one = problem()
    out, _ = module.single_head_attention(f32(x), *map(f32, one))
    yield f"one head: max |out - oracle| = {distance(backend, out, reference_single_head(x, *one)[0])}"
    out, _ = module.multi_head_attention(*map(f32, (x, *w)), 2)
    yield f"two heads: max |out - oracle| = {distance(backend, out, reference_multi_head(x, *w, 2)[0])}"


def buildup_lines(backend, module, f32, call):
    _, x, _, one = problem()
    x0, order, zero = x[0], [4, 3, 2, 1, 0, 5], np.zeros((8, 4))
    average = reference_single_head(x0, zero, zero, one[2])[0]  # every score 0
    head = reference_single_head(x0, *one)[0]
    oracles = (average, average, average,
               reference_single_head(x0, *one, scale=False)[0], head, head,
               reference_single_head(x0[order], *one)[0][-1:])  # fmt: skip
    outs = call(f32(x0), *map(f32, one))
    for name, out, expected in zip(STAGES, outs, oracles, strict=True):
        yield f"{name}: max |out - oracle| = {distance(backend, out, expected)}"


def frameworks_lines(backend, module, f32, call):
    _, x, w, one = problem()
    x0 = x[0]
    heads = np.stack([reference_single_head(x0, *(a[:, h * 4 : h * 4 + 4] for a in w[:3]))[0]
                      for h in range(2)])  # fmt: skip
    out, _ = call(*map(f32, (x0, *w[:3])), 2)
    yield f"every head at once: max |out - oracle| = {distance(backend, out, heads)}"
    expected = oracle_gradient([x0, *one], 1)  # dL/dw_q of L = sum(out)
    grad = module.gradient(*map(f32, (x0, *one)))
    yield f"dL/dw_q: max |grad - oracle| = {distance(backend, grad, expected)}"


def attention_lines(backend, module, f32, call):
    _, x, w, _ = problem()
    keep = np.ones((2, 6), dtype=bool)
    keep[1, :2] = False  # sequence 1's keys 0 and 1: its queries 0 and 1 see none
    mask = keep[:, None, None, :]
    out, _ = call(*map(f32, (x, *w)), 2, backend.from_numpy(mask))
    expected, _ = reference_multi_head(x, *w, 2, mask)
    yield f"two heads, left-padded: max |out - oracle| = {distance(backend, out, expected)}"
    found = np.asarray(backend.to_numpy(out), np.float64)
    yield f"rows with nothing to attend: max |out| = {np.abs(found[1, :2]).max()}"


def backward_lines(backend, module, f32, call):
    rng, x, _, one = problem()
    d_out = rng.standard_normal((2, 6, 4))
    grads = call(f32(x), *map(f32, one), f32(d_out))
    inputs = [x, *one]
    for i, name in enumerate(("x", "w_q", "w_k", "w_v")):
        expected = oracle_gradient(inputs, i, d_out)
        yield f"d_{name}: max |grad - oracle| = {distance(backend, grads[name], expected)}"


def oracle_gradient(inputs, i, d_out=1.0):
    """dL/d inputs[i], L = sum(out * d_out) of the single-head oracle on
    `inputs` (x, w_q, w_k, w_v), by central differences."""
    expected = np.zeros_like(inputs[i])
    for at in np.ndindex(expected.shape):
        ends = []
        for step in (1e-5, -1e-5):
            moved = [a.copy() for a in inputs]
            moved[i][at] += step
            ends.append((reference_single_head(*moved)[0] * d_out).sum())
        expected[at] = (ends[0] - ends[1]) / 2e-5
    return expected


def blockwise_lines(backend, module, f32, call):
    _, x, _, one = problem()
    expected, _ = reference_single_head(x, *one)
    for size in (2, 4):
        out, _ = call(*(f32(x @ a) for a in one), block_size=size)
        yield f"blocks of {size}: max |out - oracle| = {distance(backend, out, expected)}"


def kernel_lines(backend, module, f32, call):
    _, x, _, one = problem()
    expected, _ = reference_single_head(x, *one)
    q, k, v = (f32(x @ a) for a in one)
    keep = backend.from_numpy(np.ones((2, 6), dtype=bool))
    for size in (2, 4):
        out, _ = call(q, k, v, keep, (size, True, 1 / math.sqrt(4), True, None, None))
        yield f"blocks of {size}: max |out - oracle| = {distance(backend, out, expected)}"


def kv_cache_lines(backend, module, f32, call):
    _, x, w, _ = problem()
    cache, rows = module.init_kv_cache((2,), 6, 8, 2), []
    for t in range(6):
        out_t, cache = call(f32(x[:, t]), cache, *map(f32, w), 2)
        rows.append(np.asarray(backend.to_numpy(out_t), np.float64))
    out = np.stack(rows, axis=-2)
    expected, _ = reference_multi_head(x, *w, 2)
    yield f"token by token, two heads: max |out - oracle| = {np.abs(out - expected).max():.2e}"


def variants_lines(backend, module, f32, call):
    _, x, w, _ = problem()
    variant = Variant(n_kv_heads=2, rotary=Rotary(), window=3, softcap=2.0, alibi=True)
    weights = (w[0], w[1][:, :4], w[2][:, :4], w[3])  # w_k, w_v: (C, H_kv * D)
    out, _ = call(*map(f32, (x, *weights)), 4, variant=variant)
    expected, _ = reference_multi_head(x, *weights, 4, variant=variant)
    yield f"GQA, rotary, window, soft-cap, ALiBi: max |out - oracle| = {distance(backend, out, expected)}"


def module_lines(backend, module, f32, call):
    _, x, w, _ = problem()
    layer = module.CausalSelfAttention.from_weights(*(np.float32(a) for a in w), 2)
    out, _ = call(layer, f32(x))
    yield f"the module, two heads: max |out - oracle| = {distance(backend, out, reference_multi_head(x, *w, 2)[0])}"


def sharded_lines(backend, module, f32, call):
    _, x, w, _ = problem()
    shards, keep = module.shard_sequence(f32(x), n_devices=3)
    out = module.unshard_sequence(call(shards, *map(f32, w), 2, keep), 6)
    yield f"the ring over 3 devices, two heads: max |out - oracle| = {distance(backend, out, reference_multi_head(x, *w, 2)[0])}"


def torch_ring_lines(backend, module, f32, call):
    """The ring over three processes forked from this one, as the notebook
    forks them, the library's ring_attention in each."""
    import datetime

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp

    _, x, w, _ = problem()

    def device(rank, port, result):
        torch.set_num_threads(1)  # as the notebook's: a fork copies no pool
        timeout = datetime.timedelta(seconds=60)
        store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=3,
                                timeout=timeout)  # fmt: skip
        try:
            rows, keep = module.shard_sequence(f32(x))
            out = module.unshard_sequence(call(rows, *map(f32, w), 2, keep), 6)
            if rank == 0:
                result.copy_(out)
        finally:
            dist.destroy_process_group()

    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    result = torch.zeros(x.shape, dtype=torch.float64).share_memory_()
    args = (store.port, result)
    mp.start_processes(device, args, nprocs=3, start_method="fork")
    out = result.numpy()
    yield f"the ring over 3 processes, two heads: max |out - oracle| = {np.abs(out - reference_multi_head(x, *w, 2)[0]).max():.2e}"


JAX_RING = """
import math
import numpy as np
import jax
jax.config.update("jax_platforms", "cpu")
jax.config.update("jax_num_cpu_devices", 3)
from impl_jax.arrays import from_numpy, to_numpy
from impl_jax.sharded import make_mesh, ring_attention, shard_sequence, unshard_sequence
from shared.reference import reference_multi_head
rng = np.random.default_rng(0)
x = rng.standard_normal((2, 6, 8))
w = [rng.standard_normal((8, 8)) / math.sqrt(8) for _ in range(4)]
f32 = lambda a: from_numpy(a, "float32")
mesh = make_mesh(3)
shards, keep = shard_sequence(f32(x), mesh=mesh)
ring = jax.jit(ring_attention, static_argnames=("n_heads", "mesh"))
out = unshard_sequence(ring(shards, *map(f32, w), 2, keep, mesh=mesh), 6)
found = np.asarray(to_numpy(out), np.float64)
print(f"{np.abs(found - reference_multi_head(x, *w, 2)[0]).max():.2e}")
"""


def jax_ring_lines(backend, module, f32, call):
    """The ring over a mesh of three CPU devices, in a child process: JAX
    fixes its devices when it starts, and this one has started with one."""
    done = subprocess.run([sys.executable, "-c", JAX_RING], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    yield f"the ring over 3 devices, two heads: max |out - oracle| = {done.stdout.strip()}"


def training_task():
    """The training notebooks' task (notebooks/chapters.py's TRAINING_TASK):
    its float64 parameters and its first batch."""
    config = TrainConfig(vocab=8, seq_len=8, d_model=8, n_heads=2, batch=3, steps=1)
    task = make_task(config)
    return task, next(task.batches())


def against_numpy(backend, task, tokens, value, grads):
    """The lines of AGAINST_NUMPY: the loss and the gradients (by name)
    against NumPy's backward by hand, in float64."""
    import impl_numpy.train as by_hand

    expected = by_hand.gradients(task.params, tokens, 2)
    loss = float(np.asarray(backend.to_numpy(value), np.float64))
    yield f"the loss: |loss - float64's| = {abs(loss - by_hand.loss(task.params, tokens, 2)):.2e}"
    yield f"every gradient: max |grad - float64's| = {max(float(distance(backend, grads[n], expected[n])) for n in expected):.2e}"


def train_lines(backend, module, f32, call):
    task, tokens = training_task()
    params = module.init_params(task.params, "float32")
    grads = call(params, module.as_tokens(tokens), 2)
    value = module.loss(params, module.as_tokens(tokens), 2)
    yield from against_numpy(backend, task, tokens, value, grads)


def train_flax_lines(backend, module, f32, call):
    from flax import nnx

    task, tokens = training_task()
    model = module.AttentionOnlyLM(task.params, 2, "float32")
    as_tokens = importlib.import_module("impl_jax.train").as_tokens
    state = nnx.jit(nnx.grad(module.loss))(model, as_tokens(tokens))
    value = module.loss(model, as_tokens(tokens))
    grads = nnx.merge(nnx.graphdef(model), state).params()
    yield from against_numpy(backend, task, tokens, value, grads)


EXPECTED = {  # a chapter: the lines its notebook prints, from the library
    "lesson": lesson_lines,
    "buildup": buildup_lines,
    "frameworks": frameworks_lines,
    "attention": attention_lines,
    "backward": backward_lines,
    "blockwise": blockwise_lines,
    "kernel": kernel_lines,
    "kv_cache": kv_cache_lines,
    "variants": variants_lines,
    "module": module_lines,
    "sharded": sharded_lines,
    "train": train_lines,
    "train_flax": train_flax_lines,
}
OWN_EXPECTED = {
    ("sharded", "torch"): torch_ring_lines,
    ("sharded", "jax"): jax_ring_lines,
}
"""The lines of a framework's own run cell (notebooks/chapters.py's OWN_RUNS),
where EXPECTED's for the chapter are not its lines (torch's kernel's are)."""


STAGES = build.chapter_of("buildup").names[:7]
"""The build-up's seven stages (its eighth name is their softmax)."""


def library_attention(framework, module):
    """attention.py's multi_head_attention, which composes the variant
    functions as the variants chapter's run cell does."""
    attention = importlib.import_module(f"impl_{framework}.attention")
    return attention.multi_head_attention, ("n_heads",)


def called(framework, module):
    """A module called on x, as the module chapter's run cell calls it."""
    return (lambda layer, x: layer(x)), ()


def every_stage(framework, module):
    """The build-up's stages, each run on the same arguments."""
    stages = [getattr(module, name) for name in STAGES]
    return (lambda *args: [stage(*args) for stage in stages]), ()


LIBRARY = {"variants": library_attention, "module": called, "buildup": every_stage}
"""A chapter whose run cell defines the function it runs: the library's
function that does what it does, and its arguments that decide shapes."""


def as_the_notebook_calls(framework, function, static):
    """Through the framework's compiler where it traces (jax.jit, with the
    arguments that decide shapes static), as written elsewhere: what
    notebooks/build.py's run_cell writes."""
    compiler = registry.get(framework).compiler
    if compiler is None or not compiler.traces:
        return function
    backend = importlib.import_module(f"impl_{framework}.backend")
    return backend.compiled(function, static_argnames=static)


ELSEWHERE = {
    ("kernel", "torch"): "Triton's, run by tests/test_torch_kernel_notebook.py "
    "where Triton is (tox -e crosscheck, kernels)"
}
"""The notebooks that need what their framework's env does not install."""

KERNEL = "this-interpreter"
RESET = "%reset -f"
"""The cell run before each notebook: the kernel's namespace emptied, so
that a notebook sees nothing of the one run before it; only the modules
imported stay, which are what a fresh kernel costs (torch or JAX: seconds)."""


@pytest.fixture(scope="module")
def jupyter_kernel(tmp_path_factory):
    """A Jupyter kernel of this interpreter (nbclient's manager), started
    here, so that the first notebook's kernel is restarted like any other's
    (kernel_of_its_own), and shut down after the last. It is named for these
    tests alone: a "python3" kernel installed for the user could be another
    Python's."""
    from jupyter_client.manager import AsyncKernelManager

    where = tmp_path_factory.mktemp("jupyter")
    spec = where / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": KERNEL, "language": "python"})
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JUPYTER_PATH", str(where))  # searched first
        manager = AsyncKernelManager(kernel_name=KERNEL)
        # as nbclient starts one: IPython's history in memory, not in $HOME
        history = "--HistoryManager.hist_file=:memory:"
        run_sync(manager.start_kernel)(cwd=str(where), extra_arguments=[history])
        yield manager
        if manager.has_kernel:
            run_sync(manager.shutdown_kernel)(now=True)


def restart(manager):
    """A new process for the manager's kernel, if it has one: nothing
    imported, and this process's environment as it is now (jupyter_client
    copies it at each start)."""
    if manager.has_kernel:
        run_sync(manager.restart_kernel)(now=True)


@contextlib.contextmanager
def kernel_of_its_own(manager, **environment):
    """A kernel started for what runs inside, with `environment` over this
    process's (a name given None: unset), and another for what runs after,
    with this process's environment as it is."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in environment.items():
            if value is None:
                patch.delenv(name, raising=False)
            else:
                patch.setenv(name, value)
        restart(manager)  # jupyter_client copies the environment as it starts
    try:
        yield manager
    finally:
        restart(manager)


def printed(code) -> list[str]:
    """The lines the cells printed to stdout (a warning on stderr, e.g. from
    a forked process, is not a line of theirs)."""
    return "".join(
        o.get("text", "") for c in code for o in c.outputs if o.get("name") == "stdout"
    ).splitlines()


def executed(path: Path, cwd: Path, kernel, timeout: int = 300):
    """The notebook run top to bottom in `kernel`, its namespace emptied
    first (RESET), as Jupyter runs it; a cell that raises, or runs over
    `timeout` seconds, fails the test."""
    document = nbformat.read(path, as_version=4)
    document.cells.insert(0, nbformat.v4.new_code_cell(RESET))
    client = NotebookClient(document, timeout=timeout, km=kernel, kernel_name=KERNEL,
                            resources={"metadata": {"path": str(cwd)}})  # fmt: skip
    try:
        client.execute()
    except CellExecutionError:
        raise  # the cell's error; the kernel is idle
    except Exception:  # a cell over its time, a dead kernel: still busy
        restart(kernel)  # or every notebook after it would wait on it
        raise
    finally:
        if client.kc is not None:
            client.kc.stop_channels()
    reset, *code = [c for c in document.cells if c.cell_type == "code"]
    assert reset.outputs == []
    return code


@pytest.mark.parametrize("slug", build.SLUGS)
def test_the_notebook_runs_top_to_bottom_with_the_oracle_s_distances(
    backend, slug, tmp_path, jupyter_kernel
):
    framework = name_of(backend)
    if framework not in build.frameworks_of(slug):
        only = ", ".join(build.frameworks_of(slug))
        pytest.skip(f"{slug}: a notebook in {only} only (notebooks/chapters.py)")
    if (slug, framework) in ELSEWHERE:
        pytest.skip(f"{slug}_{framework}.ipynb: {ELSEWHERE[slug, framework]}")
    path = NOTEBOOKS / f"{slug}_{framework}.ipynb"
    if (slug, framework) in build.chapters.BEFORE_IMPORTS:  # fixed early
        with kernel_of_its_own(jupyter_kernel):  # JAX's devices
            code = executed(path, tmp_path, jupyter_kernel)
    else:
        code = executed(path, tmp_path, jupyter_kernel)
    if slug != "lesson":  # the project is importable here: the setup cell is a no-op
        assert code[0].source.startswith("# Setup:") and code[0].outputs == []
    module = importlib.import_module(
        f"impl_{framework}.{build.chapter_file(slug, framework)}")  # fmt: skip
    call = None
    if slug != "lesson":  # the function the run cell calls, called as it calls it
        _, function, static = build.runs(slug, framework)
        if slug in LIBRARY:  # the library's function that does what it does
            function, static = LIBRARY[slug](framework, module)
        else:
            function = getattr(module, function)
        call = as_the_notebook_calls(framework, function, static)
    f32 = lambda a: backend.from_numpy(a, "float32")  # noqa: E731
    lines = OWN_EXPECTED.get((slug, framework), EXPECTED[slug])
    expected = lines(backend, module, f32, call)
    assert printed(code) == list(expected)


def test_an_edit_above_reaches_a_traced_run_cell_run_again(
    backend, tmp_path, jupyter_kernel
):
    """As a student works: the notebook run, then the cell of its Try it
    edited and run again, then the run cell again, in the same kernel. A
    compiler that traces (jax.jit) would run what it traced before the edit;
    the run cell empties what it kept first, so the edit fails it."""
    framework, slug = name_of(backend), "kernel"
    compiler = registry.get(framework).compiler
    if compiler is None or not compiler.traces:
        pytest.skip(f"{framework}: no compiler that traces, nothing kept to forget")
    path = tmp_path / "edited.ipynb"
    document = nbformat.read(NOTEBOOKS / f"{slug}_{framework}.ipynb", as_version=4)
    right, wrong = TRY_IT[slug]
    code = [c for c in document.cells if c.cell_type == "code"]
    edited = next(c.source for c in code if right in c.source)
    document.cells += [nbformat.v4.new_code_cell(edited.replace(right, wrong)),
                       nbformat.v4.new_code_cell(code[-1].source)]  # fmt: skip
    nbformat.write(document, path)
    with pytest.raises(CellExecutionError) as raised:
        executed(path, tmp_path, jupyter_kernel)
    assert raised.value.ename == "AssertionError"
    assert "blocks of 2: max |out" in str(raised.value)  # what the run cell printed


def test_torch_s_ring_forks_from_a_kernel_whose_torch_has_used_its_threads(
    backend, tmp_path, jupyter_kernel
):
    """A student's kernel has run torch on its thread pool before the ring's
    run cell forks the three processes: each runs on one thread, for a fork
    copies none of the pool's threads (waiting on them, they hung)."""
    if name_of(backend) != "torch":
        pytest.skip("torch's ring alone forks processes")
    document = nbformat.read(NOTEBOOKS / "sharded_torch.ipynb", as_version=4)
    pool = "import torch\ntorch.tril(torch.ones(2048, 2048)).sum()  # on the pool"
    document.cells.insert(0, nbformat.v4.new_code_cell(pool))
    path = tmp_path / "after_threads.ipynb"
    nbformat.write(document, path)
    # the pool of a 2-core machine, not the suite's one thread
    with kernel_of_its_own(jupyter_kernel, OMP_NUM_THREADS="2"):
        code = executed(path, tmp_path, jupyter_kernel, timeout=60)
    assert printed(code)[0].startswith("the ring over 3 processes")


@pytest.mark.neutral
def test_a_notebook_with_a_wrong_mask_fails(tmp_path):
    code = code_of(NOTEBOOKS / "lesson_numpy.ipynb")
    assert "np.tril(" in code
    done = run(code.replace("np.tril(", "np.triu("), tmp_path)
    assert done.returncode != 0 and "AssertionError" in done.stderr


TRY_IT = {  # a chapter: the edit its closing words ask for, in NumPy (or its own)
    "frameworks": (
        "w.reshape(C, n_heads, C // n_heads).swapaxes(0, 1)",
        "w.reshape(n_heads, C, C // n_heads)",
    ),
    "buildup": ("q @ k.mT / math.sqrt(D), -np.inf", "q @ k.mT, -np.inf"),
    "attention": ("exp / np.where(row_sum > 0, row_sum, 1.0)", "exp / row_sum"),
    "backward": (
        "(d_weights - (d_weights * weights).sum(axis=-1, keepdims=True))",
        "d_weights",
    ),
    "blockwise": ("acc *= rescale[..., None]", "pass"),
    "kv_cache": ("filled = np.arange(L) <= cache.length", "filled = np.arange(L) >= 0"),
    "module": (
        "return self.w_q, self.w_k, self.w_v, self.w_o",
        "return self.w_k, self.w_q, self.w_v, self.w_o",
    ),
    "variants": (
        "key_positions[None, :] > query_positions",
        "key_positions[None, :] >= query_positions",
    ),
    "kernel": ("acc = acc * rescale[:, None]", "acc = acc"),
    "sharded": ("elif step <= rank:", "elif step < rank:"),
    "train": (
        "logits, targets = logits[:, :-1], tokens[:, 1:]",
        "logits, targets = logits[:, :-1], tokens[:, :-1]",
    ),
    "train_flax": ("x = x + out", "x = out"),
}


@pytest.mark.neutral
@pytest.mark.parametrize("slug", build.SLUGS[1:])
def test_the_try_it_of_a_chapter_fails_its_notebook(slug, monkeypatch):
    framework = build.frameworks_of(slug)[0]  # NumPy's, or its own
    name = f"{slug}_{framework}.ipynb"
    code = code_of(NOTEBOOKS / name)
    right, wrong = TRY_IT[slug]
    assert code.count(right) == 1
    forget = getattr(registry.get(framework).compiler, "forget", "")
    if forget:  # run here, it would empty this session's caches: each exec
        # below defines every function anew, so nothing kept is stale
        module, _, function = forget.removesuffix("()").rpartition(".")
        monkeypatch.setattr(importlib.import_module(module), function, lambda: None)
    exec(compile(code, name, "exec"), {})  # as built: passes
    # a kernel shows a RuntimeWarning (0 / 0) and runs on, to the assert;
    # pyproject.toml's filterwarnings would raise it first
    with pytest.raises(AssertionError), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        exec(compile(code.replace(right, wrong), name, "exec"), {})
