"""`triptych bench` modes that need torch: they run, agree and say what
torch.compile did with the hand-written attention."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from shared import tolerance
from triptych import cli
from triptych.bench.modes import runners

ROOT = Path(__file__).resolve().parents[1]


def test_torch_modes_run_and_report_the_fusion(tmp_path):
    # one T: each T is a compile of its own with every cache off (runners.py),
    # the same path again at 10 to 30 s
    out = tmp_path / "bench"
    argv = ["bench", "--quick", "--quiet", "--T", "8", "--output-dir", str(out)]
    code = cli.main([*argv, "--modes", "torch-eager,torch-compile,torch-sdpa"])
    assert code == 0
    report = json.loads((out / "results.json").read_text())
    for row in report["results"]:
        assert row["status"] == "ok", row
        assert row["speedup_vs_numpy"] is None  # numpy was not asked for
        if row["mode"] == "torch-compile":
            assert isinstance(row["fused_attention"], bool)
            assert row["jit_speedup_over"] == "torch-eager"
            assert row["jit_speedup"] > 0
        else:
            assert row["fused_attention"] is None
    assert "torch.compile " in (out / "bench.md").read_text()


def _textbook_attention(q, k, v):
    """softmax(q kᵀ / sqrt(D)) v: the pattern inductor knows how to fuse."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, T, T)
    return torch.softmax(scores, dim=-1) @ v, None  # (B, H, T, D)


def test_the_fusion_note_sees_a_pattern_inductor_replaces():
    rng = np.random.default_rng(0)
    q, k, v = (torch.from_numpy(rng.standard_normal((1, 2, 16, 8))) for _ in range(3))
    runner = runners.compiled_torch_runner(_textbook_attention, (q, k, v), lambda: None)
    out, _ = runner.to_numpy(runner.first_call())
    expected, _ = _textbook_attention(q, k, v)
    np.testing.assert_allclose(out, expected.numpy(), rtol=1e-12, atol=1e-12)
    assert runner.notes() == {"fused_attention": True}


def test_the_other_cpu_torch_modes_run_and_agree(tmp_path):
    """The blockwise, tuned and training modes (the bench over every installed
    framework runs in the numpy and jax envs, without torch: docs/suite.md)."""
    for extra, names in (
        ([], "torch-blockwise,torch-tuned"),
        (["--train"], "torch-train-eager"),
    ):
        out = tmp_path / names.replace(",", "_")
        argv = ["bench", "--quick", "--quiet", "--output-dir", str(out), *extra]
        assert cli.main([*argv, "--modes", names]) == 0
        report = json.loads((out / "results.json").read_text())
        assert {row["mode"] for row in report["results"]} == set(names.split(","))
        for row in report["results"]:
            assert row["status"] == "ok", row
            assert row["max_abs_diff_out"] <= tolerance("float32").atol, row


def test_the_profilers_own_log_stays_off_stderr(tmp_path):
    """torch.profiler's libkineto writes a line to stderr each time it starts
    and stops; the bench sets its level before the first profile, when
    libkineto reads it (so a process of its own: this one may have profiled) and
    still takes the breakdown."""
    out = tmp_path / "bench"
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    done = subprocess.run(
        [sys.executable, "-m", "triptych", "bench", "--quick", "--breakdown",
         "--quiet", "--modes", "torch-eager", "--T", "64", "--output-dir", str(out)],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(ROOT)},
        timeout=600,  # a hung bench fails the test, not the suite
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "profiler_st" not in done.stderr  # profiler_start, profiler_stop
    (row,) = json.loads((out / "results.json").read_text())["results"]
    assert row["share_matmul"] > 0  # profiled all the same
