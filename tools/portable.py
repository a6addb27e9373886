"""The suite on other kernel paths of this machine: what `tox -e portable` runs
(docs/suite.md, "Portable").

    python tools/portable.py [--only NAME ...] [--list]

A tolerance fitted to one machine fails on the next, whose BLAS, vector unit
or thread count sums in another order. This machine can take several of those
paths: OpenBLAS's kernels for older CPUs (NumPy), ATen's kernels without
AVX-512 or without any vector extension, MKL capped at AVX2 or on its
reproducible SSE2 path (torch), XLA code generated for AVX without AVX2 and
FMA (JAX), one thread or two. (XLA for SSE4.2 computes the same bits as for
AVX here, and cannot convert float16 at all: LLVM finds no __extendhfsf2.)
For each configuration this runs, in a fresh process with its environment set
before any framework starts:

1. a fingerprint: attention, blockwise attention and the backward on the
   `long` preset in float32, hashed, to show whether this configuration
   really computes other bits than the default one (where it does not, this
   CPU has no such path: the row says "same bits" and still runs);
2. the numerics, blockwise and KV-cache tests (and, for torch and JAX, their
   kernel tests in the interpreters) for the backend it affects; not for the
   backend as installed, whose own tox env runs them (its fingerprint is the
   one the others are compared with).

Prints one row per configuration and exits 1 when any test failed.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = [
    "tests/test_numerics.py",
    "tests/test_blockwise.py",
    "tests/test_kv_cache.py",
    "tests/test_backend.py",
    "tests/test_shared.py",
]
# A backend with a kernel.py also runs its kernel tests, in their interpreters.
KERNEL_TESTS = ["tests/test_kernels.py", "tests/test_{name}_kernel.py"]
# A backend's own numerics tests, where it has them (torch's and JAX's): the
# jitted attention's hostile magnitudes depend on the CPU's fused multiply-add.
OWN_TESTS = ["tests/test_{name}_numerics.py"]
# A framework whose compile step traces (JAX) compiles every shape anew under
# each flag: its configurations run the tests whose tolerance depends on
# rounding (float32 and half precision, the hostile magnitudes), not the
# float64 and bad-input ones.
TRACED_SELECTION = "float32 or float16 or bfloat16 or hostile"


def framework(name: str):
    """The backend `name` of the registry (shared/registry.py)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from shared import registry

    return registry.get(name)


@dataclass(frozen=True)
class Configuration:
    name: str
    why: str
    backend: str
    env: dict[str, str] = field(default_factory=dict)


CONFIGURATIONS = [
    Configuration("numpy-default", "NumPy as installed", "numpy"),
    Configuration(
        "numpy-haswell",
        "OpenBLAS's AVX2 kernels (the old tolerance failed there)",
        "numpy",
        {"OPENBLAS_CORETYPE": "Haswell"},
    ),
    Configuration(
        "numpy-sandybridge",
        "OpenBLAS's AVX kernels",
        "numpy",
        {"OPENBLAS_CORETYPE": "Sandybridge"},
    ),
    Configuration(
        "numpy-prescott",
        "OpenBLAS's SSE3 kernels",
        "numpy",
        {"OPENBLAS_CORETYPE": "Prescott"},
    ),
    Configuration(
        "numpy-1-thread", "one BLAS thread", "numpy", {"OPENBLAS_NUM_THREADS": "1"}
    ),
    Configuration(
        "numpy-no-avx512",
        "NumPy's sin, cos and power without AVX-512",
        "numpy",
        {
            "NPY_DISABLE_CPU_FEATURES": "AVX512F AVX512CD AVX512_SKX AVX512_CLX "
            "AVX512_CNL AVX512_ICL AVX512_SPR"
        },
    ),
    Configuration("torch-default", "torch as installed: two threads", "torch"),
    Configuration(
        "torch-aten-avx2",
        "ATen's AVX2 kernels",
        "torch",
        {"ATEN_CPU_CAPABILITY": "avx2"},
    ),
    Configuration(
        "torch-aten-default",
        "ATen's kernels with no vector extension",
        "torch",
        {"ATEN_CPU_CAPABILITY": "default"},
    ),
    Configuration(
        "torch-mkl-avx2",
        "MKL capped at AVX2",
        "torch",
        {"MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    ),
    Configuration(
        "torch-mkl-compatible",
        "MKL's reproducible SSE2 path (MKL_CBWR)",
        "torch",
        {"MKL_CBWR": "COMPATIBLE"},
    ),
    Configuration("torch-1-thread", "one thread", "torch", {"OMP_NUM_THREADS": "1"}),
    Configuration("jax-default", "JAX as installed", "jax"),
    Configuration(
        "jax-avx",
        "XLA's code generated for AVX, without AVX2 and FMA",
        "jax",
        {"XLA_FLAGS": "--xla_cpu_max_isa=AVX"},
    ),
    Configuration(
        "jax-avx2",
        "XLA's code generated for AVX2 and FMA, without AVX-512",
        "jax",
        {"XLA_FLAGS": "--xla_cpu_max_isa=AVX2"},
    ),
]


def fingerprint(backend: str) -> str:
    """A hash of what `backend` computes on the `long` preset in float32:
    attention, blockwise attention and the backward."""
    import importlib

    module = importlib.import_module(framework(backend).package)
    from shared import PRESETS, make_fixture

    preset = PRESETS["long"]
    fixture = make_fixture(preset).astype("float32")
    x = module.from_numpy(fixture.x)
    w = [module.from_numpy(fixture.params[n]) for n in ("w_q", "w_k", "w_v", "w_o")]
    H = preset.n_heads
    results = [
        *module.multi_head_attention(x, *w, H),
        *module.multi_head_blockwise_attention(x, *w, H, block_size=64),
        *module.multi_head_attention_backward(x, *w, H, x).values(),
    ]
    digest = hashlib.sha256()
    for result in results:
        digest.update(module.to_numpy(result).tobytes())
    return digest.hexdigest()[:12]


def environment(configuration: Configuration) -> dict[str, str]:
    """The configuration's variables over this process's environment, with
    two threads (torch's own default on two cores; tox's envs run one)
    unless the configuration sets its own."""
    env = {**os.environ, "OMP_NUM_THREADS": "2", **configuration.env}
    env["PYTHONHASHSEED"] = "0"
    env.update(framework(configuration.backend).kernel_env)  # Triton's interpreter
    return env


def fingerprint_in(configuration: Configuration) -> str:
    """`fingerprint` of the configuration's backend, in a fresh process with
    its environment (one line on failure: what the child printed last)."""
    child = subprocess.run(
        [sys.executable, __file__, "--fingerprint", configuration.backend],
        env=environment(configuration),
        capture_output=True,
        text=True,
    )
    if child.returncode != 0:
        last = (child.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"{configuration.name}: the fingerprint failed: {last}")
    return child.stdout.strip()


def run_tests(configuration: Configuration):
    """The configuration's tests: (passed, pytest's summary line, its output)."""
    backend = configuration.backend
    found = framework(backend)
    own = [t.format(name=backend) for t in OWN_TESTS]
    own = [t for t in own if (ROOT / t).exists()]
    command = [sys.executable, "-m", "pytest", *TESTS, *own, "--backends", backend]
    if found.kernel:
        command += [*(t.format(name=backend) for t in KERNEL_TESTS), "--kernels"]
    if found.compiler and found.compiler.traces:
        command += ["-k", TRACED_SELECTION]
    command += ["--strict-backends", "-m", "not crosscheck"]
    command += ["-q", "-p", "no:cacheprovider"]
    tests = subprocess.run(
        command,
        env=environment(configuration),
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    lines = tests.stdout.strip().splitlines()
    summary = lines[-1].strip("= ") if lines else "no output"
    return tests.returncode == 0, summary, tests.stdout + tests.stderr


def settings(configuration: Configuration) -> str:
    """The configuration's variables as a shell would set them."""
    return " ".join(f"{k}={v}" for k, v in configuration.env.items())


def indented(text: str) -> str:
    """`text` under a configuration's row, wrapped between words at 80
    columns (NumPy's list of features is longer)."""
    return textwrap.fill(text, 80, initial_indent="    ", subsequent_indent="      ")


LEGEND = """\
Each configuration runs in a fresh process. "other bits": attention,
blockwise attention and the backward on `long` (float32) hash differently
from the backend as installed, so this configuration really takes another
path; "same bits": this CPU has no other path there. The installed backend
is only fingerprinted: tox -e numpy, torch and jax run its tests."""


def main(argv=None) -> int:
    names = "\n".join(f"  {c.name:21} {c.why}" for c in CONFIGURATIONS)
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=f"configurations:\n{names}\n\n{LEGEND}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run these only")
    parser.add_argument("--list", action="store_true", help="list them and exit")
    parser.add_argument("--fingerprint", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.fingerprint:
        print(fingerprint(args.fingerprint))
        return 0
    unknown = set(args.only or ()) - {c.name for c in CONFIGURATIONS}
    if unknown:
        parser.error(f"unknown configurations {sorted(unknown)}; see --list")
    chosen = [c for c in CONFIGURATIONS if not args.only or c.name in args.only]
    if args.list:
        for c in chosen:
            print(f"{c.name}: {c.why}")
            print(indented(settings(c) or "as installed"))
        return 0
    print(LEGEND, flush=True)
    installed = {}  # backend -> the fingerprint of the backend as installed
    failed, tested = [], 0
    for configuration in chosen:
        backend = configuration.backend
        if backend not in installed:  # compared with, even if not chosen
            base = Configuration(f"{backend}-default", "", backend)
            installed[backend] = fingerprint_in(base)
        if not configuration.env:
            print(f"{configuration.name}: {installed[backend]} (as installed)")
            continue
        print(f"{configuration.name}: {configuration.why}", flush=True)
        started = time.perf_counter()
        printed = fingerprint_in(configuration)
        passed, summary, output = run_tests(configuration)
        tested += 1
        bits = "same bits" if printed == installed[backend] else "other bits"
        print(indented(f"{settings(configuration)}: {bits} ({printed})"))
        print(
            f"    {'PASS' if passed else 'FAIL'}: {summary}; "
            f"{time.perf_counter() - started:.0f} s in all",
            flush=True,
        )
        if not passed:
            failed.append(configuration.name)
            print(output[-4000:])
    if failed:
        print(f"FAIL: {', '.join(failed)}")
    else:
        plural = "s" if tested != 1 else ""
        print(f"PASS: the tests hold in the {tested} configuration{plural} run")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
