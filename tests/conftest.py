"""One test body, run once per backend (the Keras way).

    pytest --backends numpy,torch        run those backends (default: every one
                                         installed)
    pytest --strict-backends             a backend asked for but missing is an error,
                                         and so is any skipped test (tox -e crosscheck)
    pytest tests/browser --browser       the side-by-side page in headless Chromium
                                         (tox -e browser)
    pytest --device cuda                 torch's and JAX's tests on the GPU (torch's
                                         default device, JAX's platform); auto: the
                                         GPU if one is there; cpu, the default: the
                                         CPU even where there is a GPU
    pytest --device cuda --tf32          float32 matmuls in TF32 (torch's allow_tf32,
                                         JAX's "tensorfloat32" precision), checked
                                         at the TF32 tolerance; without --tf32 on a
                                         GPU, TF32 is off and float32 is float32
    pytest --kernels                     also the flash-attention kernels in their
                                         interpreters (tests/test_*kernel*.py; tox -e
                                         kernels, with Triton and TRITON_INTERPRET=1)

Files named test_<backend>_*.py hold what only that framework has (its fused
kernels, jit, compile); they are collected only when that backend is selected.

Fixtures:
    backend       the module impl_numpy, impl_torch or impl_jax, one run each
    kernel        impl_torch.kernel or impl_jax.kernel (NumPy has no kernel
                  language), one run each, with --kernels
    backend_pair  (a, b) for every pair of selected backends (marked crosscheck)
    dtype         "float64" and "float32"
    short_load_window
                  (every test) the bench's look at the machine's load
                  before a sweep: 0.05 s, not 0.5
"""

from __future__ import annotations

import functools
import importlib
import itertools

import pytest
from hypothesis import HealthCheck, settings

from shared import registry

# Property tests (tests/test_properties.py). "ci", the default: derandomized, so
# every run of tox draws the same problems, 200 (each checked for both
# properties; 100 in JAX, where each is a compile: test_properties.py). "fuzz" (tox -e fuzz): 2,000 fresh ones from the seed given with
# --hypothesis-seed, printed in the header. No example database either way: a
# run depends on nothing but the code and the seed.
_PROPERTY_SETTINGS = dict(
    deadline=None,  # a JAX example compiles for each new shape
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "ci", max_examples=200, derandomize=True, **_PROPERTY_SETTINGS
)
settings.register_profile("fuzz", max_examples=2000, **_PROPERTY_SETTINGS)
settings.load_profile("ci")


@pytest.fixture(autouse=True)
def short_load_window(monkeypatch):
    """`triptych bench` watches the machine's load for half a second
    (`triptych.bench.load.BEFORE_S`) before each sweep, asleep; the tests
    check what it reports, not how long it watched: a tenth of that, in every
    test that runs the bench in its process (a bench, Ctrl-C, --memory...)."""
    from triptych.bench import load

    monkeypatch.setattr(
        load, "before", functools.partial(load.before, load.BEFORE_S / 10)
    )


def pytest_addoption(parser):
    parser.addoption(
        "--backends",
        default="installed",
        help="comma-separated backends to test, or 'installed' (default)",
    )
    parser.addoption(
        "--browser",
        action="store_true",
        help="also run tests/browser/ (headless Chromium through Playwright)",
    )
    parser.addoption(
        "--device",
        choices=("cpu", "cuda", "auto"),
        default="cpu",
        help="where torch and JAX compute: cpu (default), cuda, or auto (cuda if "
        "there is one)",
    )
    parser.addoption(
        "--tf32",
        action="store_true",
        help="with --device cuda: float32 matmuls in TF32, at the TF32 tolerance "
        "(shared/tolerances.py); without it, TF32 is off",
    )
    parser.addoption(
        "--kernels",
        action="store_true",
        help="also run the kernel tests (tests/test_*kernel*.py; impl_torch's "
        "needs Triton)",
    )
    parser.addoption(
        "--strict-backends",
        action="store_true",
        help="fail, never skip: a missing backend or a skipped test is an error",
    )


def _load(name):
    try:
        return importlib.import_module(registry.get(name).package)
    except ImportError:
        return None


def _hooks(name):
    """impl_<name>.backend: what the suite sets up of the framework."""
    return importlib.import_module(f"{registry.get(name).package}.backend")


def _load_kernel(name):
    try:
        return importlib.import_module(f"{registry.get(name).package}.kernel")
    except ImportError as error:  # impl_torch.kernel without Triton
        raise pytest.UsageError(f"--kernels: {error}") from None


def pytest_configure(config):
    option = config.getoption("--backends")
    known = registry.names()
    names = known if option == "installed" else tuple(option.split(","))
    unknown = set(names) - set(known)
    if unknown:
        raise pytest.UsageError(f"unknown backends {sorted(unknown)}; have {known}")
    modules = {name: _load(name) for name in names}
    missing = [name for name, module in modules.items() if module is None]
    if missing and (option != "installed" or config.getoption("--strict-backends")):
        extras = ",".join(registry.get(name).install.extra for name in missing)
        raise pytest.UsageError(
            f"backends {missing} were asked for but do not import: "
            + registry.install_command(extras)
        )
    config.selected_backends = {n: m for n, m in modules.items() if m is not None}
    config.selected_kernels = {}
    if config.getoption("--kernels"):
        for name in config.selected_backends:
            if registry.get(name).kernel:
                config.selected_kernels[name] = _load_kernel(name)
    for name in config.selected_backends:
        # The suite checks float64 against a float64 oracle; importing impl_jax
        # leaves JAX in float32-only mode, so the tests turn x64 on themselves
        # (tests/test_jax_x64.py checks the mode off, in fresh processes).
        _hooks(name).use_float64()
    config.device = _choose_device(config)


def _choose_device(config) -> str:
    """Put torch and JAX on the device --device asks for: "cpu" or "cuda".

    Raises:
        pytest.UsageError: --device cuda where no selected framework sees a
            CUDA GPU (one line; pytest's usage-error exit code, 4).
    """
    asked = config.getoption("--device")
    selected = config.selected_backends
    if config.getoption("--tf32") and asked == "cpu":
        raise pytest.UsageError(
            "--tf32: TF32 is a GPU's matmul precision; add --device cuda"
        )
    if asked == "cpu":
        for name in selected:
            _hooks(name).use_device("cpu")  # JAX: before it picks a device
        return "cpu"
    seen = {
        name: _hooks(name).cuda_device() is not None
        for name in selected
        if "cuda" in registry.get(name).devices
    }
    if not any(seen.values()):
        if asked == "auto":
            return "cpu"
        which = ", ".join(seen) or "only numpy, which has no GPU,"
        raise pytest.UsageError(
            f"--device cuda: no CUDA GPU here ({which} selected, and none sees "
            "one); run with --device cpu or --device auto"
        )
    for name, sees in seen.items():
        if sees:
            _hooks(name).use_device("cuda")
    _set_float32_matmuls(config, "tf32" if config.getoption("--tf32") else "float32")
    return "cuda"


def _set_float32_matmuls(config, precision):
    """TF32 on or off in both GPU frameworks, and the float32 tolerance with it
    (shared.tolerances.use_float32_matmul; docs/suite.md). JAX's own default on
    a GPU is TF32 for float32 dots, torch's is off: the suite says which."""
    from shared.tolerances import use_float32_matmul

    for name in config.selected_backends:
        _hooks(name).float32_matmuls(precision == "tf32")
    use_float32_matmul(precision)


def pytest_ignore_collect(collection_path, config):
    if collection_path.name == "browser" and not config.getoption("--browser"):
        return True  # tox -e browser runs them, with Chromium installed
    stem = collection_path.name
    if "kernel" in stem and not config.getoption("--kernels"):
        return True  # tox -e kernels runs them, with Triton installed
    for name in registry.names():
        if stem.startswith(f"test_{name}_") and name not in config.selected_backends:
            return True
    return None


def pytest_report_header(config):
    import shared

    names = ", ".join(config.selected_backends) or "none"
    profile = settings.get_current_profile_name()
    seed = config.getoption("hypothesis_seed", None)
    from shared.tolerances import float32_matmul, tolerance

    matmuls = float32_matmul()
    level = tolerance("float32")
    return [
        f"backends: {names}; device: {config.device}",
        f"float32 matmuls: {'TF32' if matmuls == 'tf32' else 'float32, TF32 off'}; "
        f"float32 tolerance {level.atol:g} (docs/suite.md)",
        f"shared from: {shared.__file__}",
        f"hypothesis: profile {profile!r}, "
        + ("derandomized" if settings.default.derandomize else f"seed {seed}"),
    ]


def pytest_generate_tests(metafunc):
    selected = metafunc.config.selected_backends
    if "backend" in metafunc.fixturenames:
        metafunc.parametrize("backend", list(selected.values()), ids=list(selected))
    if "kernel" in metafunc.fixturenames:
        kernels = metafunc.config.selected_kernels
        metafunc.parametrize("kernel", list(kernels.values()), ids=list(kernels))
    if "backend_pair" in metafunc.fixturenames:
        pairs = list(itertools.combinations(selected, 2))
        metafunc.parametrize(
            "backend_pair",
            [(selected[a], selected[b]) for a, b in pairs],
            ids=[f"{a}-{b}" for a, b in pairs],
        )
    if "dtype" in metafunc.fixturenames:
        metafunc.parametrize("dtype", ["float64", "float32"])


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "backend_pair" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.crosscheck)
        # so that one run (tox -e crosscheck) can select them with -m
        if "kernel" in item.path.name:
            item.add_marker(pytest.mark.kernels)
        if item.path.parent.name == "browser":
            item.add_marker(pytest.mark.browser)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if (
        report.skipped
        and not hasattr(report, "wasxfail")  # an expected failure is no skip
        and item.config.getoption("--strict-backends")
    ):
        report.outcome = "failed"
        report.longrepr = f"skipped under --strict-backends: {report.longrepr}"
    return report
