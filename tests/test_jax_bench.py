"""`triptych bench` modes that need JAX and flax: they run and agree, and each
build compiles afresh."""

from __future__ import annotations

import json

from triptych import cli
from triptych.bench import modes, settings
from triptych.bench.problem import make_problem


def test_jax_modes_run_and_agree(tmp_path):
    out = tmp_path / "bench"
    argv = ["bench", "--quick", "--quiet", "--output-dir", str(out)]
    code = cli.main([*argv, "--modes", "numpy,jax-eager,jax-jit,flax-jit,jax-dpa"])
    assert code == 0
    report = json.loads((out / "results.json").read_text())
    for row in report["results"]:
        assert row["status"] == "ok", row
        compiled = row["mode"] in ("jax-jit", "flax-jit", "jax-dpa")
        assert (row["compile_s"] is not None) == compiled
        assert row["speedup_vs_numpy"] > 0
    assert set(report["gemm_peak"]["by_library"]) == {"numpy", "jax"}


def test_every_build_traces_afresh(monkeypatch):
    import impl_jax

    traced = []
    original = impl_jax.multi_head_attention

    def counting(*args, **kwargs):  # runs only while jax.jit traces
        traced.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(impl_jax, "multi_head_attention", counting)
    config = settings.resolve_config(
        cli.build_parser().parse_args(["bench", "--quick"])
    )
    sizes = dict(d_model=config.d_model, n_heads=config.n_heads, batch=config.batch)
    problem = make_problem(8, **sizes, dtype=config.dtype, device="cpu")
    for _ in range(2):
        runner = modes.MODES["jax-jit"].build(problem)
        runner.call()
        runner.call()
    assert len(traced) == 2  # one trace per build (a real compile), none per call
