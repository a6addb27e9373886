"""`triptych bench`: the files, the JSON schema, the correctness guard and the
bad input. Runs in the numpy and jax tox envs (docs/suite.md): a mode whose
framework is missing must be listed as skipped, and the others run. No test
reads a time's value."""

from __future__ import annotations

import csv
import dataclasses
import gc
import json
import math
import re
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from shared import tolerance
from triptych import cli
from triptych.bench import config as bench_config
from triptych.bench import machine, modes, settings, sweep, timing
from triptych.bench import memory as memory_sweep
from triptych.bench import plots as bench_plots
from triptych.bench import report as bench_report
from triptych.bench import summary as bench_summary
from triptych.bench.modes import attention, base
from triptych.bench.timing import Timing, attention_flops, gemm_flops, measure
from triptych.common.backends import BackendMissingError, installed_backends

pytestmark = pytest.mark.installed  # the numpy and jax envs (docs/suite.md)

TOP_KEYS = {
    "schema",
    "created",
    "command",
    "header",
    "config",
    "flops",
    "gemm_peak",
    "bandwidth",
    "breakdown",
    "scaling",
    "modes",
    "results",
}
INSTALLED = installed_backends()


def installed(framework: str) -> bool:
    return framework in INSTALLED


def run_bench(tmp_path, *argv) -> tuple[int, dict]:
    """`triptych bench --quick --quiet ...` in this process; exit code and JSON."""
    out = tmp_path / "bench"
    code = cli.main(["bench", "--quick", "--quiet", "--output-dir", str(out), *argv])
    return code, json.loads((out / "results.json").read_text())


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """One `triptych bench --quick` over every mode, shared by the tests below."""
    out = tmp_path_factory.mktemp("quick") / "bench"
    code = cli.main(["bench", "--quick", "--quiet", "--output-dir", str(out)])
    return code, out, json.loads((out / "results.json").read_text())


def test_quick_run_writes_every_file(quick_run):
    code, out, report = quick_run
    assert code == 0
    has_pair = any(r["jit_speedup"] is not None for r in report["results"])
    drawn = {"speedup.png": has_pair, "scaling.png": False, "roofline.png": True}
    for name in bench_report.FILES:
        assert (out / name).exists() == drawn.get(name, True), name
    for name in ("time_vs_T.png", "speedup.png", "roofline.png"):
        if (out / name).exists():
            assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(out.parent.rglob(".triptych-bench-*"))  # no staging left


def test_quick_run_json_schema(quick_run):
    _, _, report = quick_run
    assert set(report) == TOP_KEYS
    assert report["schema"] == bench_report.SCHEMA == "triptych-bench/1"
    config = report["config"]
    assert config["T"] == list(bench_config.QUICK["T"])
    left_out = [
        n for n in modes.SETS["attention"] if settings.slow_to_build(modes.MODES[n])
    ]
    assert config["left_out"] == left_out == [
        "torch-compile", "torch-blockwise-compile", "torch-triton"
    ]  # fmt: skip
    assert config["modes"] == [n for n in modes.SETS["attention"] if n not in left_out]
    assert config["d_head"] * config["n_heads"] == config["d_model"]
    header = report["header"]
    for key in ("cpu", "logical_cores", "schedulable_cores", "device", "dtype"):
        assert header[key], key
    assert header["threads"]["requested"] == config["threads"]
    assert header["threads"]["xla"]
    assert header["versions"]["numpy"] == np.__version__
    assert set(report["gemm_peak"]) == {"n", "dtype", "library", "gflops", "by_library"}
    assert report["gemm_peak"]["gflops"] > 0
    assert "numpy" in report["gemm_peak"]["by_library"]
    assert [m["name"] for m in report["modes"]] == config["modes"]
    load = report["header"]["load"]
    for window in (load["before"], load["during"]):
        assert set(window) == {"others_busy_cores", "cores", "loadavg", "busy"}
        assert window["others_busy_cores"] >= 0  # measured: this is Linux
        assert window["busy"] == (window["others_busy_cores"] > 0.2 * window["cores"])
    assert len(report["results"]) == len(config["T"]) * len(config["modes"])
    for row in report["results"]:
        assert tuple(row) == bench_report.ROW_FIELDS
        assert row["useful_gflop"] == attention_flops(1, row["T"], 32) / 1e9


def test_quick_run_installed_modes_agree_and_are_timed(quick_run):
    _, _, report = quick_run
    device = report["header"]["device"]
    for row in report["results"]:
        framework = row["framework"]
        unavailable = modes.MODES[row["mode"]].unavailable(device)
        if not installed(framework) or unavailable:
            assert row["status"] == "skipped"
            why = unavailable if installed(framework) else "pip install -c constraints"
            assert why in row["reason"]
            assert all(row[f] is None for f in bench_report.TIMING_FIELDS)
            continue
        assert row["status"] == "ok", row
        assert row["reason"] is None
        assert all(
            row[f] is not None and row[f] > 0 for f in bench_report.TIMING_FIELDS
        ), row
        assert row["q25_s"] <= row["median_s"] <= row["q75_s"]
        assert row["samples"] == bench_config.QUICK["repeats"]
        assert row["max_abs_diff_out"] <= tolerance("float32").atol
        # the fused kernels and the blockwise modes never hold the weights whole
        returns_weights = modes.MODES[row["mode"]].returns_weights
        assert (row["max_abs_diff_weights"] is None) == (not returns_weights)
        assert (row["compile_s"] is None) != row["compiled"]
        assert row["speedup_vs_numpy"] > 0
        assert row["pct_of_gemm_peak"] > 0
        twin = modes.MODES[row["mode"]].eager_twin
        assert row["jit_speedup_over"] == twin
        assert (row["jit_speedup"] is None) == (twin is None)
        torch_compiled = ("torch-compile", "torch-blockwise-compile")
        assert (row["fused_attention"] is None) == (row["mode"] not in torch_compiled)


def test_quick_run_csv_and_markdown(quick_run):
    _, out, report = quick_run
    with open(out / "results.csv", newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert tuple(reader.fieldnames) == bench_report.RUN_FIELDS + bench_report.ROW_FIELDS
    assert [(r["mode"], int(r["T"])) for r in rows] == [
        (r["mode"], r["T"]) for r in report["results"]
    ]
    assert {r["dtype"] for r in rows} == {"float32"}
    md = (out / "bench.md").read_text()
    assert md.startswith("## triptych bench, ")
    assert report["command"] in md
    assert "| T | mode | kind | first call ms |" in md
    assert "float32 GEMM peak:" in md
    assert "Method:" in md
    for row in report["results"]:
        if row["status"] == "ok":
            assert f"| {row['T']} | {row['mode']} | {row['kind']} |" in md
    for mode in report["modes"]:
        if not mode["available"]:
            assert f"- skipped {mode['name']}: " in md
    assert bench_summary.fusion_line(report["results"]) is None  # no torch.compile
    assert "--quick left out torch-compile, torch-blockwise-compile" in md
    assert "- load before the sweep: " in md and "- load during the sweep: " in md
    noisy = [r for r in report["results"] if r["noisy"]]
    assert ("* noisy: the interquartile range exceeds 25%" in md) == bool(noisy)
    for row in report["results"]:
        if row["status"] == "ok":
            assert row["noisy"] == (
                row["iqr_s"] > 0.25 * row["median_s"]
                or row["min_s"] < 0.5 * row["median_s"]
            )
        else:
            assert row["noisy"] is None


def test_command_in_results_repeats_the_run(quick_run):
    _, _, report = quick_run
    argv = shlex.split(report["command"])
    assert argv[:2] == ["triptych", "bench"]
    args = cli.build_parser().parse_args(argv[1:])
    # with --modes spelled out, --quick leaves nothing out: the same modes run
    expected = {**report["config"], "left_out": []}
    assert settings.config_dict(settings.resolve_config(args)) == expected


# The correctness guard --------------------------------------------------------


def _perturbed_numpy(which):
    """A NumPy mode whose `which` output is off by 1e-3 everywhere."""

    def build(problem):
        runner = attention.build_numpy(problem)

        def call():
            out, weights = runner.call()
            if which == "out":
                return out + 1e-3, weights
            return out, weights + 1e-3

        return base.Runner(call, runner.to_numpy)

    return build


@pytest.fixture
def wrong_mode():
    names = []

    def register(name, build, cuda_only=False):
        modes.register(
            base.Mode(
                name=name,
                framework="numpy",
                kind="ours",
                compiled=False,
                eager_twin=None,
                returns_weights=True,
                linear_memory=False,
                build=build,
                summary="a deliberately wrong mode (test)",
                cuda_only=cuda_only,
            )
        )
        names.append(name)
        return name

    yield register
    for name in names:
        modes.unregister(name)


@pytest.mark.parametrize("which", ["out", "weights"])
def test_a_wrong_mode_is_reported_wrong_and_not_timed(tmp_path, wrong_mode, which):
    name = wrong_mode(f"numpy-wrong-{which}", _perturbed_numpy(which))
    code, report = run_bench(tmp_path, "--modes", f"numpy,{name}")
    assert code == 1
    rows = {(r["mode"], r["T"]): r for r in report["results"]}
    for T in bench_config.QUICK["T"]:
        assert rows["numpy", T]["status"] == "ok"
        row = rows[name, T]
        assert row["status"] == "wrong"
        assert "beyond the float32 tolerance" in row["reason"]
        assert math.isclose(row[f"max_abs_diff_{which}"], 1e-3, rel_tol=1e-3)
        assert all(
            row[f] is None for f in (*bench_report.TIMING_FIELDS, "speedup_vs_numpy")
        )
    md = (tmp_path / "bench" / "bench.md").read_text()
    assert f"- wrong: {name} at T=8: output differs from NumPy's" in md
    # first call, median, IQR, GFLOP/s, % peak, vs numpy: none (no compile
    # or jit speedup column: no mode of the run has one)
    assert f"| 8 | {name} | ours | - | - | - | - | - | - | wrong |" in md


def test_a_cuda_only_mode_is_skipped_on_a_cpu_and_the_peak_keeps_its_framework(
    tmp_path, wrong_mode
):
    def build(problem):
        raise AssertionError("built on a CPU")

    name = wrong_mode("numpy-on-cuda", build, cuda_only=True)
    code, report = run_bench(tmp_path, "--modes", f"{name},numpy", "--device", "cpu")
    assert code == 0
    skipped, ok = report["results"][:2]
    assert (skipped["status"], skipped["reason"]) == (
        "skipped",
        "runs on a CUDA GPU only; this run is on cpu",
    )
    assert ok["status"] == "ok"
    assert set(report["gemm_peak"]["by_library"]) == {"numpy"}
    md = (tmp_path / "bench" / "bench.md").read_text()
    assert f"- skipped {name}: runs on a CUDA GPU only; this run is on cpu" in md


def test_a_mode_needing_a_missing_module_says_what_to_install():
    mode = dataclasses.replace(
        modes.MODES["numpy"], requires=("a_module_that_is_not_there",)
    )
    assert mode.unavailable("cuda") == (
        "needs a_module_that_is_not_there, which is not installed: "
        'pip install -c constraints.txt -e ".[kernels]"'
    )
    assert modes.MODES["numpy"].unavailable("cpu") is None


def test_memory_skips_a_cuda_only_mode(tmp_path, wrong_mode):
    name = wrong_mode("numpy-on-cuda", attention.build_numpy, cuda_only=True)
    out = tmp_path / "memory"
    argv = ["bench", "--memory", "--quick", "--quiet", "--output-dir", str(out)]
    assert cli.main([*argv, "--modes", name, "--T", "8"]) == 0
    (row,) = json.loads((out / "memory.json").read_text())["results"]
    assert (row["status"], row["reason"]) == (
        "skipped",
        "runs on a CUDA GPU only; this run is on cpu",
    )


def test_a_failing_mode_is_reported_and_the_others_run(tmp_path, wrong_mode):
    def build(problem):
        raise RuntimeError("no kernel for this\nsecond line")

    name = wrong_mode("numpy-broken", build)
    code, report = run_bench(tmp_path, "--modes", f"{name},numpy", "--T", "4")
    assert code == 1
    broken, ok = report["results"]
    assert (broken["status"], broken["reason"]) == (
        "error",
        "RuntimeError: no kernel for this",
    )
    assert ok["status"] == "ok"


def test_the_collections_between_points_leave_out_what_the_process_held(
    tmp_path, wrong_mode
):
    """The sweep freezes the heap it starts with (each gc.collect between two
    points then looks at the points' objects only) and unfreezes it at the
    end; a heap the caller froze stays frozen."""
    frozen_while_running = []

    def build(problem):
        frozen_while_running.append(gc.get_freeze_count())
        raise RuntimeError("recorded")

    name = wrong_mode("numpy-records-the-heap", build)
    assert gc.get_freeze_count() == 0
    run_bench(tmp_path / "a", "--modes", name, "--T", "4")
    assert frozen_while_running[0] > 0 and gc.get_freeze_count() == 0
    gc.freeze()
    try:
        run_bench(tmp_path / "b", "--modes", name, "--T", "4")
        assert gc.get_freeze_count() > 0  # (unfrozen, the count would be 0)
    finally:
        gc.unfreeze()


def test_measure_does_not_time_a_rejected_result():
    calls = []

    def call():
        calls.append(1)
        return len(calls)

    timing, first = measure(call, repeats=5, warmup=2, min_sample_s=0, check=None)
    assert first == 1 and len(timing.samples_s) == 5 and len(calls) == 1 + 2 + 5
    calls.clear()
    timing, first = measure(
        call, repeats=5, warmup=2, min_sample_s=0, check=lambda r: False
    )
    assert (timing, first, len(calls)) == (None, 1, 1)


def test_without_warmup_k_comes_from_the_first_call(monkeypatch):
    """On a fake clock where every call takes 2**-10 s, a sample of at least
    2**-7 s holds k = 8 calls, with --warmup 0 as with a warm-up."""
    now = [0.0]
    monkeypatch.setattr(timing, "_clock", lambda: now[0])  # the clock in use

    def call():
        now[0] += 2**-10

    for warmup in (0, 2):
        result, _ = measure(call, repeats=3, warmup=warmup, min_sample_s=2**-7)
        assert result.calls_per_sample == 8, warmup
        assert result.samples_s == (2**-10,) * 3


# Figures ----------------------------------------------------------------------


def test_train_times_a_training_step_of_every_installed_framework(tmp_path):
    """--train: the training modes (one fast one per installed framework),
    checked against NumPy's first loss, their FLOPs those of a training step,
    their speedups over numpy-train."""
    wanted = {
        "numpy": "numpy-train",
        "torch": "torch-train-eager",
        "jax": "jax-train-jit",
    }
    names = [wanted[f] for f in ("numpy", "torch", "jax") if installed(f)]
    code, report = run_bench(tmp_path, "--train", "--modes", ",".join(names))
    assert code == 0
    assert report["config"]["train"] is True
    assert report["command"].endswith("--train")
    assert "| median ms | steps/s |" in bench_summary.markdown(report)
    assert set(report["flops"]) == {"training step"}
    rows = report["results"]
    assert sorted({r["mode"] for r in rows}) == sorted(names)
    C, B = bench_config.TRAIN_QUICK["d_model"], bench_config.TRAIN_QUICK["batch"]
    for row in rows:
        assert row["status"] == "ok", row
        assert row["useful_gflop"] == timing.train_step_flops(B, row["T"], C) / 1e9
        assert (
            row["max_abs_diff_out"] <= tolerance("float32").atol
            and row["max_abs_diff_weights"] is None
        )
        if row["mode"] == "numpy-train":
            assert row["speedup_vs_numpy"] == 1.0
    assert (
        settings.resolve_config(
            cli.build_parser().parse_args(["bench", "--train"])
        ).modes
        == modes.SETS["train"]
    )


def test_a_training_step_counts_three_times_its_forward():
    B, T, C = 2, 32, 16
    V = 64  # max(64, T / 2)
    forward = 2 * attention_flops(B, T, C) + 2 * B * T * C * V
    assert timing.train_step_flops(B, T, C) == 3 * forward
    assert timing.train_step_flops(B, 256, C) == 3 * (
        2 * attention_flops(B, 256, C) + 2 * B * 256 * C * 128
    )


def test_useful_flops_count_the_causal_pairs_only():
    B, T, C, H = 2, 7, 12, 3
    D = C // H
    pairs = sum(1 for i in range(T) for j in range(T) if j <= i)
    count = 4 * (2 * B * T * C * C) + 2 * (2 * B * H * pairs * D)
    assert attention_flops(B, T, C) == count
    assert gemm_flops(5) == 2 * 125


def test_timing_statistics():
    t = Timing(
        first_call_s=9.0, samples_s=(5.0, 1.0, 4.0, 2.0, 3.0), calls_per_sample=1
    )
    assert (t.median_s, t.q25_s, t.q75_s, t.iqr_s, t.min_s) == (3.0, 2.0, 4.0, 2.0, 1.0)


def test_speedups_and_share_of_peak():
    config = settings.resolve_config(
        cli.build_parser().parse_args(["bench", "--quick"])
    )
    rows = []
    for name, median in (("numpy", 8.0), ("jax-eager", 4.0), ("jax-jit", 1.0)):
        row = sweep._row(modes.MODES[name], config, 8, "ok")
        row.update(median_s=median, gflops=row["useful_gflop"] / median)
        rows.append(row)
    sweep.derive(rows, {"gflops": rows[2]["gflops"] * 4})
    numpy_row, eager, jit = rows
    assert (numpy_row["speedup_vs_numpy"], eager["speedup_vs_numpy"]) == (1.0, 2.0)
    assert (jit["speedup_vs_numpy"], jit["jit_speedup"]) == (8.0, 4.0)
    assert (jit["jit_speedup_over"], eager["jit_speedup"]) == ("jax-eager", None)
    assert jit["pct_of_gemm_peak"] == pytest.approx(25.0)


def test_a_stale_speedup_plot_is_removed(tmp_path):
    out = tmp_path / "bench"
    out.mkdir()
    (out / "speedup.png").write_bytes(b"from an earlier run")
    code = cli.main(
        ["bench", "--quick", "--quiet", "--modes", "numpy", "--output-dir", str(out)]
    )
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["results.json", "results.csv", "bench.md", "time_vs_T.png", "roofline.png"]
    )


def test_the_bench_docs_name_every_compiled_mode_and_its_eager_twin():
    """docs/bench.md's sentence on jit speedups is the one bench.md prints, made
    from the registry (every mode's `compiled` and `eager_twin`)."""
    readme = (Path(__file__).parent.parent / "docs" / "bench.md").read_text()
    twins = bench_summary.eager_twins_text()
    assert "torch-blockwise-compile over torch-blockwise" in twins
    assert twins in " ".join(readme.replace("`", "").split())
    method = " ".join(bench_summary.method_text(10).split())
    compiled = bench_summary.compiled_modes_text()
    assert f"for {compiled} it holds the trace and the compile" in method
    assert f"({twins})" in method
    assert re.split(", | and ", compiled) == [
        name for name, mode in modes.MODES.items() if mode.compiled
    ]


# Skips and bad input ----------------------------------------------------------


def test_a_missing_framework_is_skipped_and_the_others_run(tmp_path, monkeypatch):
    def load_backend(name):
        if name != "numpy":
            raise BackendMissingError(f"backend {name!r} is not installed (test)")

    monkeypatch.setattr(sweep, "load_backend", load_backend)
    code, report = run_bench(tmp_path, "--modes", "numpy,torch-eager,jax-jit")
    assert code == 0
    status = {
        (r["mode"], r["T"]): (r["status"], r["reason"]) for r in report["results"]
    }
    for T in bench_config.QUICK["T"]:
        assert status["numpy", T] == ("ok", None)
        assert status["torch-eager", T] == (
            "skipped",
            "backend 'torch' is not installed (test)",
        )
        assert status["jax-jit", T][0] == "skipped"
    available = {m["name"]: m["available"] for m in report["modes"]}
    assert available == {"numpy": True, "torch-eager": False, "jax-jit": False}
    assert set(report["gemm_peak"]["by_library"]) == {"numpy"}


def _exit_code(argv) -> int:
    try:
        return cli.main(argv)
    except SystemExit as stop:
        return stop.code


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--modes", "numpy,fast-attention"],
            "unknown mode 'fast-attention'; choose from numpy, ",
        ),
        (["--T", "8,0"], "every T must be at least 1, got 0"),
        (["--T", "eight"], "not an integer: 'eight'"),
        (["--repeats", "0"], "must be at least 1, got 0"),
        (["--device", "tpu"], "invalid choice: 'tpu'"),
        (["--dtype", "int8"], "invalid choice: 'int8'"),
        (["--n-heads", "5"], "--n-heads 5 does not divide --d-model 32"),
        (["--threads", "100000"], "--threads 100000 asks for more than the"),
        (["--memory", "--train"], "--memory measures attention's memory, not"),
    ],
)
def test_bad_arguments_exit_2_with_one_clear_line(tmp_path, capsys, argv, message):
    out = str(tmp_path / "bench")
    assert _exit_code(["bench", "--quick", "--output-dir", out, *argv]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert not (tmp_path / "bench").exists()


@pytest.mark.parametrize("memory", [False, True])
def test_an_output_dir_that_cannot_be_written_exits_2_before_the_sweep(
    tmp_path, capsys, monkeypatch, memory
):
    def not_reached(*args, **kwargs):
        raise AssertionError("the sweep ran")

    monkeypatch.setattr(sweep, "run", not_reached)
    monkeypatch.setattr(memory_sweep, "run", not_reached)
    a_file = tmp_path / "a_file"
    a_file.write_text("in the way\n")
    argv = ["bench", "--quick", "--modes", "numpy", "--output-dir", str(a_file)]
    assert _exit_code(argv + ["--memory"] * memory) == 2
    assert capsys.readouterr().err == (
        f"triptych bench: error: cannot write to {a_file}: "
        "it is a file, not a directory\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


def test_cuda_without_a_gpu_exits_2_naming_what_exists(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(
        machine, "cuda_visibility", lambda: {"torch": None, "jax": None}
    )
    argv = ["bench", "--quick", "--device", "cuda", "--output-dir", str(tmp_path)]
    assert _exit_code(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "triptych bench: error: --device cuda was asked for, but no CUDA device "
        "exists here: torch sees none, jax sees none; the devices there are: cpu"
    )
    assert list(tmp_path.iterdir()) == []


def test_auto_without_a_gpu_runs_on_the_cpu(monkeypatch):
    monkeypatch.setattr(machine, "cuda_visibility", lambda: {"torch": None})
    assert machine.resolve_device("auto") == ("cpu", {})


def test_cuda_seen_by_torch_only_skips_the_jax_modes(monkeypatch):
    monkeypatch.setattr(
        machine, "cuda_visibility", lambda: {"torch": "a GPU", "jax": None}
    )
    device, unreachable = machine.resolve_device("cuda")
    assert device == "cuda"
    assert unreachable["jax"] == "jax sees no CUDA device (its devices: cpu)"
    assert "torch" not in unreachable


# --quick's plan, the machine's load, noisy rows --------------------------------


def test_quick_keeps_its_promise_of_seconds_by_its_plan():
    """--quick's plan is small: two short T, three samples, tiny sizes, and
    no mode whose first call runs torch.compile (10 to 30 s per T); --modes
    brings any back. (Its time is never asserted: the plan is what is.)"""
    parse = cli.build_parser().parse_args
    for argv, kind in (
        (["bench", "--quick"], "attention"),
        (["bench", "--quick", "--train"], "train"),
    ):
        config = settings.resolve_config(parse(argv))
        assert len(config.T) <= 2 and max(config.T) <= 16
        assert config.repeats <= 3 and config.warmup <= 1 and config.d_model <= 32
        assert not any(settings.slow_to_build(modes.MODES[n]) for n in config.modes)
        assert set(config.modes) | set(config.left_out) == set(modes.SETS[kind])
        line = settings.left_out_line(config)
        assert line.startswith(f"--quick leaves out {', '.join(config.left_out)}: ")
        assert line.endswith(",".join((*config.modes, *config.left_out)))
    asked = settings.resolve_config(
        parse(["bench", "--quick", "--modes", "torch-compile"])
    )
    assert asked.modes == ("torch-compile",) and asked.left_out == ()
    full = settings.resolve_config(parse(["bench"]))
    assert full.modes == modes.SETS["attention"] and full.left_out == ()
    assert full.breakdown and not config.breakdown  # profiling: not in --quick


def test_the_load_counts_other_processes_cpu_time(monkeypatch):
    from triptych.bench import load

    start = load.CpuTimes(wall=10.0, busy=100.0, own=5.0)
    end = load.CpuTimes(wall=12.0, busy=104.0, own=6.0)  # others: 3 s of CPU in 2 s
    assert load.others_cores(start, end) == 1.5
    assert load.others_cores(start, load.CpuTimes(12.0, None, 6.0)) is None
    monkeypatch.setattr(load.os, "cpu_count", lambda: 2)
    window = load.summary(start, end)
    assert window["others_busy_cores"] == 1.5 and window["busy"]
    assert load.describe(window).startswith("other processes kept 1.5 of 2 cores busy")
    quiet = load.summary(start, load.CpuTimes(12.0, 101.2, 6.0))  # 0.1 core
    assert not quiet["busy"]
    assert load.warning({"before": quiet, "during": quiet}, 2, "wall") is None
    warning = load.warning({"before": quiet, "during": window}, 2, "wall")
    assert warning.startswith("the machine was busy: during the sweep other processes")
    # what to rerun follows what this run already did
    assert warning.endswith("or with --threads 1 --clock cpu")
    one = load.warning({"before": window, "during": quiet}, 1, "wall")
    assert one.endswith("or with --clock cpu")
    cpu = load.warning({"before": window, "during": quiet}, 1, "cpu")
    assert "--threads" not in cpu and "--clock" not in cpu
    # a real reading: this process's own time grows with its work, counted
    # in clock ticks (10 ms): work for 50 ms of CPU, however fast the CPU
    first = load.read()
    spent = time.process_time()
    while time.process_time() - spent < 0.05:
        sum(i * i for i in range(10_000))
    assert load.read().own > first.own and first.busy is not None


def test_a_framework_is_timed_only_when_the_last_ones_threads_are_idle(monkeypatch):
    """A library's workers spin after its last call (OpenBLAS's for about
    0.1 s); the next framework's timing waits until the process's other
    threads ran under a tenth of a window, twice in a row, and a framework
    timed again waits for nothing. On a clock of its own: no time is read."""

    class Clock:
        now, sleeps = 0.0, 0

        def monotonic(self):
            return self.now

        def sleep(self, seconds):
            self.now += seconds
            self.sleeps += 1

    def wait(framework, readings):
        clock, reads = Clock(), iter(readings)
        monkeypatch.setattr(timing, "time", clock)
        monkeypatch.setattr(timing, "_others_cpu_ns", lambda: next(reads))
        timing.settle(framework)
        return clock.sleeps

    ms = 1_000_000
    monkeypatch.setattr(timing, "_last_timed", ["numpy"])
    # busy (5 ms of a 20 ms window), busy, then 0.5 ms twice: idle
    assert wait("torch", [0, 5 * ms, 10 * ms, 10.5 * ms, 11 * ms]) == 4
    assert timing._last_timed == ["torch"]
    assert wait("torch", []) == 0  # the same framework: nothing read
    assert wait(None, []) == 0
    spinning = [5 * ms * i for i in range(100)]  # never idle: SETTLE_MAX_S
    assert wait("jax", spinning) == round(timing.SETTLE_MAX_S / timing.SETTLE_WINDOW_S)
    assert wait("numpy", [None]) == 0  # no /proc to tell
    timing.forget_last_timed()
    assert wait("torch", []) == 0  # a new sweep's first framework


def test_the_other_threads_cpu_time_is_read_from_proc():
    import threading

    before = timing._others_cpu_ns()
    if before is None:
        pytest.skip("no /proc/self/task/*/schedstat here")

    stop = threading.Event()

    def spin():
        while not stop.is_set():
            pass

    worker = threading.Thread(target=spin)
    worker.start()
    try:  # read while it runs (an ended thread leaves /proc), until the
        # kernel has charged it some time: it may do so only at a tick
        deadline = time.monotonic() + 5
        now = timing._others_cpu_ns()
        while now <= before and time.monotonic() < deadline:
            time.sleep(0.01)
            now = timing._others_cpu_ns()
        assert now > before
    finally:
        stop.set()
        worker.join()


class Screen:
    """sys.stdout or sys.stderr, each written into one shared log in the
    order written, as a terminal shows both."""

    def __init__(self, name: str, log: list[tuple[str, str]]):
        self.name, self.log = name, log

    def write(self, text: str) -> int:
        self.log.append((self.name, text))
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def text(self) -> str:
        return "".join(text for name, text in self.log if name == self.name)


def test_a_busy_machine_is_named_in_the_header_and_on_stderr_before_the_verdict(
    tmp_path, monkeypatch
):
    """The warning is on stderr, in the header and in bench.md; on the screen
    it comes before the verdict, which is the last line."""
    from triptych.bench import load

    busy = {
        "others_busy_cores": 1.9,
        "cores": 2,
        "loadavg": [7.0, 6.0, 5.0],
        "busy": True,
    }
    monkeypatch.setattr(load, "before", lambda: dict(busy))
    monkeypatch.setattr(load, "summary", lambda start, end: dict(busy))
    log: list[tuple[str, str]] = []
    out_, err = Screen("out", log), Screen("err", log)
    monkeypatch.setattr(sys, "stdout", out_)
    monkeypatch.setattr(sys, "stderr", err)
    out = tmp_path / "bench"
    argv = ["bench", "--quick", "--modes", "numpy", "--output-dir", str(out)]
    assert cli.main(argv) == 0
    assert (
        "load before the sweep: other processes kept 1.9 of 2 cores busy (load "
        "average 7): BUSY, timings will be noisy" in out_.text()
    )
    assert err.text().startswith("triptych bench: warning: the machine was busy: ")
    screen = "".join(text for _, text in log).splitlines()
    warned = next(i for i, line in enumerate(screen) if "warning:" in line)
    assert re.fullmatch(
        r"verdict at T=16: numpy \(the one mode timed\) took [0-9.]+ ms\*?; "
        "every mode that ran agreed with NumPy",
        screen[-1],
    )
    assert warned < len(screen) - 1
    md = (out / "bench.md").read_text()
    assert "- **warning**: the machine was busy: before the sweep" in md
    report = json.loads((out / "results.json").read_text())
    assert report["header"]["load"] == {"before": busy, "during": busy}


def test_the_verdict_names_the_fastest_the_jit_gains_and_what_went_wrong():
    from triptych.bench.verdict import verdict_line

    def row(T, mode, median_ms, vs_numpy, jit=None, over=None, status="ok", **more):
        return dict(
            T=T,
            mode=mode,
            status=status,
            median_s=None if median_ms is None else median_ms / 1e3,
            speedup_vs_numpy=vs_numpy,
            jit_speedup=jit,
            jit_speedup_over=over,
            **more,
        )

    rows = [
        row(8, "jax-jit", 0.01, 20.0, 30.0, "jax-eager"),  # a smaller T: not told
        row(16, "numpy", 0.226, 1.0),
        row(16, "jax-eager", 1.38, 0.164),
        row(16, "jax-jit", 0.0409, 5.52, 33.8, "jax-eager", noisy=True),
        row(16, "flax-jit", 0.558, 0.405, 2.48, "jax-eager"),
        row(16, "jax-pallas", None, None, status="skipped"),
    ]
    assert verdict_line(rows) == (
        "verdict at T=16: jax-jit is the fastest, 0.0409 ms* (5.52x as fast as "
        "numpy); jit over eager: jax-jit 33.8x* as fast as jax-eager, flax-jit "
        "2.48x as fast as jax-eager; every mode that ran agreed with NumPy"
    )
    rows.append(row(16, "torch-eager", None, None, status="wrong"))
    assert verdict_line(rows).endswith(
        "; 1 of 6 runs were wrong or failed (named above)"
    )
    assert verdict_line([row(16, "numpy", None, None, status="error")]) == (
        "verdict: no mode was timed; 1 of 1 runs were wrong or failed (named above)"
    )


def test_noisy_rows_and_the_speedups_made_from_them_are_marked():
    config = settings.resolve_config(
        cli.build_parser().parse_args(["bench", "--quick"])
    )
    rows = []
    for name, median, iqr in (("jax-eager", 4.0, 3.0), ("jax-jit", 1.0, 0.1)):
        row = sweep._row(modes.MODES[name], config, 8, "ok")
        row.update(median_s=median, iqr_s=iqr, noisy=iqr > 0.25 * median)
        row.update(gflops=row["useful_gflop"] / median)
        rows.append(row)
    sweep.derive(rows, {"gflops": 1.0})
    table = bench_summary.results_table(rows)
    eager, jit = (dict(zip(table.columns, r, strict=True)) for r in table.rows)
    # whole milliseconds from a second on: 4000, never 4e+03
    assert eager["median ms"] == "4000*" and eager["IQR ms"] == "3000*"
    assert jit["median ms"] == "1000" and jit["jit speedup"] == "4.00*"
    assert jit["IQR ms"] == "100"
    assert table.caption.startswith("* noisy: the interquartile range exceeds 25%")
    assert "vs numpy" not in table.columns  # no NumPy in the run: no column


def test_a_column_no_mode_fills_is_left_out():
    """Eager modes alone: no compile, no jit speedup, no NumPy to compare with;
    with NumPy and a compiled mode, all three columns are back."""
    config = settings.resolve_config(
        cli.build_parser().parse_args(["bench", "--quick"])
    )

    def table(names):
        rows = []
        for name in names:
            row = sweep._row(modes.MODES[name], config, 8, "ok")
            row.update(median_s=1.0, iqr_s=0.1, first_call_s=2.0)
            row.update(
                gflops=row["useful_gflop"], compile_s=1.0 if "jit" in name else None
            )
            rows.append(row)
        sweep.derive(rows, {"gflops": 1.0})
        return bench_summary.results_table(rows)

    optional = {"compile ms", "vs numpy", "jit speedup"}
    eager = table(["torch-eager", "jax-eager"])
    assert optional.isdisjoint(eager.columns) and "median ms" in eager.columns
    assert all(len(row) == len(eager.columns) == len(eager.align) for row in eager.rows)
    assert optional <= set(table(["numpy", "jax-eager", "jax-jit"]).columns)


def test_speedups_are_drawn_on_a_log_axis(tmp_path, monkeypatch):
    axes = []
    monkeypatch.setattr(
        bench_plots, "finish_line_plot", lambda fig, ax, path: axes.append(ax)
    )
    report = {
        "config": {"T": [8, 16], "dtype": "float32", "device": "cpu", "d_model": 32, "n_heads": 4},
        "modes": [{"name": "jax-jit"}],
        "results": [
            {"mode": "jax-jit", "T": T, "jit_speedup": s, "jit_speedup_over": "jax-eager", "noisy": T == 8}
            for T, s in ((8, 1570.0), (16, 0.5))
        ],
    }  # fmt: skip
    assert bench_plots.plot_speedup(report, tmp_path / "speedup.png")
    (ax,) = axes
    assert ax.get_yscale() == "log"
    low, high = ax.get_ylim()
    assert low < 0.5 and high > 1570
    labels = [line.get_label() for line in ax.get_lines()]
    assert "hollow: noisy (IQR > 25% of the median)" in labels
