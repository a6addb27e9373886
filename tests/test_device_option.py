"""`pytest --device`: torch's and JAX's tests on a GPU where one is, and one
clear line with pytest's usage-error exit code where --device cuda finds none."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_device_cuda_without_a_gpu_is_one_line_and_a_usage_error(request):
    if request.config.device == "cuda":
        pytest.skip("this session has a GPU: --device cuda runs the suite on it")
    selected = list(request.config.selected_backends)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", str(ROOT / "tests" / "test_shared.py"),
         "--device", "cuda", "--backends", ",".join(selected), "-q"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == pytest.ExitCode.USAGE_ERROR
    which = ", ".join(b for b in selected if b != "numpy")
    assert done.stderr.strip() == (
        f"ERROR: --device cuda: no CUDA GPU here ({which or 'only numpy, which has no GPU,'} "
        "selected, and none sees one); run with --device cpu or --device auto"
    )
