"""impl_torch without Triton (the torch env has none): `import impl_torch` never
imports it, and `import impl_torch.kernel` says in one line what to install.
Triton is hidden from a fresh process, so this holds where it is installed too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HIDDEN = """
import sys
sys.modules["triton"] = None  # as if Triton were not installed
import impl_torch
assert "impl_torch.kernel" not in sys.modules and "triton" in sys.modules
import impl_torch.kernel
"""


def test_impl_torch_imports_without_triton_and_the_kernel_says_what_to_install():
    child = subprocess.run(
        [sys.executable, "-c", HIDDEN], capture_output=True, text=True, cwd=ROOT
    )
    assert child.returncode == 1
    assert child.stderr.strip().splitlines()[-1] == (
        "ImportError: impl_torch.kernel needs Triton, which is not installed: "
        'pip install -c constraints.txt -e ".[kernels]" (on a CPU, Triton runs in '
        "its interpreter: TRITON_INTERPRET=1)"
    )
