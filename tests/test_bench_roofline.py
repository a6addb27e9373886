"""`triptych bench`'s where-the-time-goes, roofline and scaling outputs: the
files, the fields of results.json, the figures open, the classifiers, the
traffic model and the exponent fit on synthetic data. NumPy modes only, tiny
sizes; no test reads a time's value."""

from __future__ import annotations

import json
import math
import re
import time

import matplotlib.image
import pytest

from triptych import cli
from triptych.bench import breakdown, gemm, roofline, scaling, settings, sweep
from triptych.bench import config as bench_config
from triptych.bench.modes import MODES
from triptych.common.tables import as_markdown

pytestmark = pytest.mark.installed  # the numpy and jax envs (docs/suite.md)

NUMPY_MODES = "numpy,numpy-blockwise,numpy-tuned"


@pytest.fixture(scope="module")
def profiled_run(tmp_path_factory):
    """`triptych bench --quick --breakdown` over the NumPy modes."""
    out = tmp_path_factory.mktemp("profiled") / "bench"
    argv = ["bench", "--quick", "--quiet", "--breakdown", "--output-dir", str(out)]
    argv += ["--threads", "1", "--clock", "cpu"]  # the CPU-time clock too
    code = cli.main([*argv, "--modes", NUMPY_MODES])
    return code, out, json.loads((out / "results.json").read_text())


def test_the_breakdown_is_in_results_and_bench_md(profiled_run):
    code, out, report = profiled_run
    assert code == 0
    assert "--breakdown" in report["command"] and "--clock cpu" in report["command"]
    assert report["config"]["clock"] == "cpu"
    bandwidth = report["bandwidth"]
    assert bandwidth["gb_s"] > 0 and bandwidth["library"] in bandwidth["by_library"]
    assert bandwidth["array_mib"] >= 4 * bandwidth["llc_mib"]  # --quick's too
    assert bandwidth["spread"] >= 0
    points = {(d["mode"], d["T"]) for d in report["breakdown"]}
    assert points == {(r["mode"], r["T"]) for r in report["results"]}
    for detail in report["breakdown"]:
        assert set(detail["shares"]) == set(breakdown.CATEGORIES)
        assert math.isclose(sum(detail["shares"].values()), 1.0)
        assert detail["method"].startswith("sampled Python lines")
        assert all(s >= 0 for s in detail["seconds"].values())
    for row in report["results"]:
        assert row["status"] == "ok"
        shares = [row[f"share_{c}"] for c in breakdown.CATEGORIES]
        assert math.isclose(sum(shares), 1.0)
        assert row["traffic_bytes"] > 0
        assert row["intensity"] == pytest.approx(
            row["useful_gflop"] * 1e9 / row["traffic_bytes"]
        )
        bound = min(report["gemm_peak"]["gflops"], row["intensity"] * bandwidth["gb_s"])
        assert row["roofline_gflops"] == pytest.approx(bound)
        assert row["pct_of_roofline"] == pytest.approx(100 * row["gflops"] / bound)
        assert row["xla_flops"] is None  # NumPy: no XLA
    md = (out / "bench.md").read_text()
    assert (
        "- memory bandwidth: " in md
        and "% of the median" in md
        and "### Where the time goes" in md
    )
    assert "| T | mode | median ms | matmul % | softmax % |" in md
    assert "clock: the process's CPU time (--clock cpu)" in md
    assert (
        "numpy's float32 GEMM: openblas" in md.lower() or "numpy's float32 GEMM" in md
    )


def test_the_roofline_figure_opens(profiled_run):
    _, out, _ = profiled_run
    image = matplotlib.image.imread(out / "roofline.png")
    assert image.shape[0] > 100 and image.shape[1] > 100


def test_scaling_is_its_own_sweep_and_reads_memory_from_the_same_folder(tmp_path):
    parse = cli.build_parser().parse_args
    argv = ["bench", "--scaling", "--output-dir", str(tmp_path)]
    config = settings.resolve_config(parse(argv))
    assert config.T == (1024, 2048, 4096, 8192, 16384, 32768)
    assert config.modes == bench_config.SCALING_MODES
    assert all(MODES[m].linear_memory for m in config.modes)
    assert (config.repeats, config.warmup, config.breakdown) == (3, 0, False)
    assert "--scaling" in settings.command_line(config)
    assert sweep.memory_run(config) is None  # no --memory run there yet
    memory = {
        "config": {"d_model": 512, "n_heads": 8, "batch": 1, "dtype": "float32"},
        "slopes": {"numpy-blockwise": 0.97},
    }
    (tmp_path / "memory.json").write_text(json.dumps(memory))
    assert sweep.memory_run(config) == memory
    other = settings.resolve_config(parse([*argv, "--d-model", "256"]))
    assert sweep.memory_run(other) is None  # other sizes: not this run's memory


def test_the_scaling_figure_draws_the_fitted_exponents(tmp_path):
    T = [1024, 2048, 4096]
    rows = [
        {"mode": m, "T": t, "status": "ok", "median_s": c * t**p}
        for m, c, p in (("numpy-blockwise", 1e-7, 2.0), ("torch-sdpa", 1e-6, 1.8))
        for t in T
    ]
    fits = scaling.scaling_fits(rows, {"slopes": {"numpy-blockwise": 0.97}})
    assert fits["numpy-blockwise"]["memory_exponent"] == 0.97
    assert fits["torch-sdpa"]["memory_exponent"] is None
    assert fits["torch-sdpa"]["time_exponent"] == pytest.approx(1.8)
    config = {"T": T, "dtype": "float32", "batch": 1, "d_model": 512}
    config |= {"n_heads": 8, "threads": 1}
    report = {
        "config": config,
        "modes": [{"name": "numpy-blockwise"}, {"name": "torch-sdpa"}],
        "results": rows,
        "scaling": fits,
    }
    assert scaling.plot_scaling(report, tmp_path / "scaling.png")
    assert matplotlib.image.imread(tmp_path / "scaling.png").shape[0] > 100
    assert not scaling.plot_scaling(dict(report, scaling=None), tmp_path / "x.png")
    table = as_markdown(scaling.scaling_table(fits))
    assert "| numpy-blockwise | 2.00 | 1024,2048,4096 | 0.97 |" in table


def test_the_exponent_fit_on_synthetic_data():
    T = [1024, 2048, 4096, 8192]
    assert scaling.fit_exponent(T, [3e-9 * t**2 for t in T]) == pytest.approx(2)
    assert scaling.fit_exponent(T, [5e-6 * t for t in T]) == pytest.approx(1)
    assert scaling.fit_exponent([8], [1.0]) is None
    # fitted over the 3 largest T: a linear start does not bend a quadratic end
    rows = [
        {"mode": "m", "T": t, "status": "ok", "median_s": s}
        for t, s in [(256, 1.0), (1024, 4e-6 * 1024**2), (2048, 4e-6 * 2048**2),
                     (4096, 4e-6 * 4096**2)]
    ]  # fmt: skip
    fit = scaling.scaling_fits(rows)["m"]
    assert fit["fit_T"] == [1024, 2048, 4096]
    assert fit["time_exponent"] == pytest.approx(2)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--scaling", "--modes", "numpy,numpy-tuned"], "--scaling times the modes"),
        (["--scaling", "--train"], "not training"),
        (["--memory", "--scaling"], "--scaling goes with the time sweep"),
        (["--memory", "--breakdown"], "--breakdown goes with the time sweep"),
        (["--memory", "--clock", "cpu"], "drop --clock"),
    ],
)
def test_scaling_and_breakdown_refuse_what_they_cannot_do(
    tmp_path, capsys, argv, message
):
    code = cli.main(["bench", "--quick", "--output-dir", str(tmp_path), *argv])
    assert code == 2
    assert message in capsys.readouterr().err


def test_the_cpu_clock_counts_this_process_only():
    import argparse

    from triptych.bench import timing
    from triptych.common.errors import CommandError

    with pytest.raises(CommandError, match="--clock cpu needs --threads 1"):
        settings._clock(argparse.Namespace(clock="cpu"), threads=2)
    assert settings._clock(argparse.Namespace(clock=None), threads=2) == "wall"

    with timing.clock("cpu"):
        seconds, _ = timing.time_first_call(lambda: time.sleep(0.05))
    assert seconds < 0.04  # asleep, the process used no CPU
    seconds, _ = timing.time_first_call(lambda: time.sleep(0.05))
    assert seconds >= 0.05  # the wall clock again after the block


def test_a_terminal_sees_where_the_time_goes_in_80_columns(
    profiled_run, monkeypatch, capsys
):
    """On a terminal the run ends with every table bench.md has after its
    header, fitted to the width, as piped it prints them in Markdown."""
    from triptych.bench import report as bench_report

    _, _, report = profiled_run
    for name, value in {
        "TTY_COMPATIBLE": "1",
        "COLUMNS": "80",
        "NO_COLOR": "1",
    }.items():
        monkeypatch.setenv(name, value)
    bench_report.print_summary(report)
    text = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
    assert "Where the time goes" in text and "matmul %" in text
    assert "Shares of one warm call's wall time" in text  # its note
    assert max(len(line) for line in text.splitlines()) <= 80
    monkeypatch.delenv("TTY_COMPATIBLE")
    bench_report.print_summary(report)  # piped: the Markdown
    assert "### Where the time goes" in capsys.readouterr().out


def test_without_the_breakdown_its_columns_and_note_are_left_out(profiled_run):
    """--no-breakdown (and --quick): the roofline alone, not five columns of
    '-' and a note on shares nobody measured."""
    import copy

    from triptych.bench import summary as bench_summary

    _, _, report = profiled_run
    report = copy.deepcopy(report)
    for row in report["results"]:
        for category in breakdown.CATEGORIES:
            row[f"share_{category}"] = None
    ((found, note),) = bench_summary.further_tables(report)
    assert not [c for c in found.columns if c.endswith(" %")]  # matmul % ...
    assert {"FLOP/byte", "% bound"} <= set(found.columns)
    assert "Shares of" not in note
    assert note.startswith("Intensity: useful FLOPs per byte")
    for row in report["results"]:
        row["intensity"] = None
    assert bench_summary.further_tables(report) == []  # neither ran


def test_numpy_samples_the_workers_of_a_threaded_call():
    """impl_numpy/tuned.py's blocks run on worker threads: their lines are
    sampled, not only the calling thread's wait for them."""
    import numpy as np

    from impl_numpy import tuned

    rng = np.random.default_rng(0)
    x = rng.standard_normal((1024, 256)).astype(np.float32)
    weights = [rng.standard_normal((256, 256)).astype(np.float32) for _ in range(4)]

    class Runner:
        def call(self):
            tuned.multi_head_tuned_attention(x, *weights, 4, workers=2)

    seconds, wall, extra = breakdown._numpy(Runner())
    assert seconds["matmul"] > 0 and wall > 0
    lines = [line["code"] for line in extra["top_lines"]]
    assert any("k_t[head, :, :stop]" in code for code in lines), lines  # a worker's


def test_the_classifiers():
    torch_names = {
        "aten::mm": "matmul",
        "aten::bmm": "matmul",
        "mkldnn::_linear_pointwise": "matmul",
        "aten::_scaled_dot_product_flash_attention_for_cpu": "fused",
        "aten::_softmax": "softmax",
        "aten::exp_": "softmax",
        "aten::masked_fill_": "softmax",
        "aten::copy_": "memory",
        "aten::cat": "memory",
        "## Call CompiledFxGraph abc ##": "softmax",
        "Torch-Compiled Region: 0/0": "other",
    }
    for name, category in torch_names.items():
        assert breakdown.classify_torch(name) == category, name
    xla_names = {
        "ynn_fusion.3": "matmul",
        "dot.1": "matmul",
        "loop_exponential_reduce_fusion": "softmax",
        "bitcast_select_fusion.7": "softmax",
        "copy_bitcast_fusion.6": "memory",
        "concatenate.2": "memory",
    }
    for name, category in xla_names.items():
        assert breakdown.classify_xla(name) == category, name
    lines = {
        "scores = q @ k.mT  # (..., T, D)": "matmul",
        "np.exp(scores, out=scores)  # in place": "softmax",
        "scores -= scores.max(axis=-1, keepdims=True)": "softmax",
        "q = np.ascontiguousarray(np.moveaxis(x, -2, -3))": "memory",
        "for start in range(0, T, Bq):": "other",
    }
    for text, category in lines.items():
        assert breakdown.classify_line(text) == category, text


def test_xla_operations_are_the_innermost_marked_events():
    def op(name, ts, dur, tid=1):
        return {"ph": "X", "pid": 1, "tid": tid, "ts": ts, "dur": dur,
                "name": name, "args": {"hlo_op": name}}  # fmt: skip

    events = [
        op("while.3", 0, 100),  # a loop: its body's operations count, not it
        op("ynn_fusion.1", 10, 40),
        {"ph": "X", "pid": 1, "tid": 1, "ts": 12, "dur": 5, "name": "Threadpool"},
        op("loop_exponential_fusion", 60, 30),
        op("copy_bitcast_fusion", 0, 20, tid=2),
        {"ph": "X", "pid": 1, "tid": 3, "ts": 0, "dur": 999, "name": "$python"},
    ]
    seconds = breakdown.xla_seconds(events, calls=2)
    assert seconds == pytest.approx(
        {"matmul": 20e-6, "softmax": 15e-6, "memory": 10e-6}
    )
    summary = breakdown.summary(seconds, 100e-6, {})
    assert summary["shares"]["other"] == pytest.approx(0.55)
    crowded = breakdown.summary({"matmul": 3.0, "softmax": 1.0}, 2.0, {})
    assert crowded["shares"] == pytest.approx(  # more than the wall: of the sum
        {"matmul": 0.75, "softmax": 0.25, "memory": 0, "fused": 0, "other": 0}
    )


def test_the_traffic_model():
    config = {"batch": 1, "d_model": 512, "n_heads": 8, "dtype": "float32"}
    B, C, H, T, s = 1, 512, 8, 4096, 4
    base = 4 * C * C + 10 * B * T * C
    naive = roofline.traffic_bytes(MODES["numpy"], T, config)
    assert naive == s * (base + 4 * B * H * T * T)  # the weights returned
    assert roofline.traffic_bytes(MODES["jax-dpa"], T, config) == s * (
        base + 2 * B * H * T * T
    )
    blocked = roofline.traffic_bytes(MODES["numpy-blockwise"], T, config)
    assert blocked == s * (base + B * C * T * (T / 512 + 1))
    assert roofline.traffic_bytes(MODES["numpy-train"], T, config) is None
    assert roofline.query_block("torch-sdpa", 4096, 8, 4) == 256
    # JAX's tuned block follows the run's threads (shared/blocks.py)
    assert roofline.query_block("jax-tuned-jit", 4096, 8, 4, threads=1) == 256
    assert (
        roofline.query_block("jax-tuned-jit", 4096, 8, 4, threads=2) == 256
    )  # 2 groups
    assert roofline.query_block("jax-tuned-jit", 100, 8, 4, threads=2) == 100


def test_a_gemm_library_that_leaves_avx512_unused_is_named(monkeypatch):
    monkeypatch.setattr(
        gemm, "cpu_features",
        lambda: {"vendor": "AuthenticAMD", "avx2": True, "avx512f": True},
    )  # fmt: skip
    pool = {"library": "openblas", "api": "blas", "num_threads": 2}
    threads = {"threadpools": [dict(pool, architecture="Haswell")], "xla": "2"}
    found = gemm.gemm_libraries({"numpy"}, threads)["numpy"]
    assert (
        found["kernels"] == "Haswell" and "OPENBLAS_CORETYPE=SkylakeX" in found["note"]
    )
    threads = {"threadpools": [dict(pool, architecture="SkylakeX")], "xla": "2"}
    assert gemm.gemm_libraries({"numpy"}, threads)["numpy"]["note"] is None


def test_the_last_level_cache_is_read_from_the_machine(tmp_path):
    """The largest data or unified cache of sysfs (an instruction cache left
    out); where the machine says nothing, the fallback, said so; the copy
    at least four times it, --quick's 16 MiB included."""
    for index, (kind, size) in enumerate(
        [
            ("Data", "48K"),
            ("Instruction", "64M"),
            ("Unified", "2048K"),
            ("Unified", "96M"),
        ]
    ):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        (folder / "type").write_text(kind + "\n")
        (folder / "size").write_text(size + "\n")
    assert roofline.last_level_cache_mib(tmp_path) == (96.0, str(tmp_path))
    empty = tmp_path / "none"
    assert roofline.last_level_cache_mib(empty) == (
        roofline.LLC_FALLBACK_MIB,
        "assumed: the machine does not say",
    )
    assert roofline.bandwidth_array_mib(16, 32.0) == 128  # --quick, a 32 MiB L3
    assert roofline.bandwidth_array_mib(256, 32.0) == 256  # the full run's
    assert roofline.bandwidth_array_mib(256, 96.0) == 384


def test_a_row_whose_median_a_stall_inflated_is_noisy():
    """--quick's 3 samples: one fast, two stalled; the IQR alone would not
    say so, the fastest sample does."""
    from triptych.bench.timing import Timing, noisy

    stalled = Timing(
        first_call_s=0.1, samples_s=(4e-5, 0.072, 0.075), calls_per_sample=1
    )
    assert noisy(stalled.median_s, stalled.iqr_s, stalled.min_s)
    steady = Timing(
        first_call_s=0.1, samples_s=(4.0e-5, 4.1e-5, 4.2e-5), calls_per_sample=1
    )
    assert not noisy(steady.median_s, steady.iqr_s, steady.min_s)
