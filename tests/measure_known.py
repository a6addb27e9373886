"""Measure `triptych check` with its defaults on the implementations the
suite knows and on those other people write (tests/known_numpy.py,
tests/known_torch.py), one command per target as a user runs it, and print
docs/check.md's table of what each gets:

    python tests/measure_known.py [--output-dir DIR] [TARGET ...]

Each row: the target, how it was called, PASS / FAIL / NOTE / SKIP counts,
what fails or deviates, and the seconds of its process (timings on a busy
machine are noisy: compare them as ratios). Not a test: pytest collects
test_*.py only; tests/test_*_check.py hold a few examples of each result.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = "tests"
TARGETS = [
    "impl_numpy:multi_head_attention",
    "impl_numpy.lesson:multi_head_attention",
    f"{TESTS}/known_numpy.py:einsum_attention",
    f"{TESTS}/known_numpy.py:log_sum_exp_attention",
    "impl_torch:multi_head_attention",
    "impl_torch.lesson:multi_head_attention",
    "torch.nn.functional:scaled_dot_product_attention",
    "torch.nn:MultiheadAttention",
    f"{TESTS}/known_torch.py:nanogpt",
    f"{TESTS}/known_torch.py:CausalSelfAttention",
    f"{TESTS}/known_torch.py:timm_style",
    f"{TESTS}/known_torch.py:gpt2_eager",
    f"{TESTS}/known_torch.py:gpt2_sdpa",
    f"{TESTS}/known_torch.py:bhtd_attention",
    "impl_jax:multi_head_attention",
    "impl_jax.lesson:multi_head_attention",
    "jax.nn:dot_product_attention",
    "flax.nnx:MultiHeadAttention",
]


def measure(target: str, output_dir: Path, extra: list[str]) -> dict:
    """One `triptych check TARGET` with the defaults: its results.json's target."""
    out = output_dir / target.replace("/", "_").replace(":", "_")
    command = [sys.executable, "-m", "triptych.cli", "check", target]
    command += ["--output-dir", str(out), *extra]
    subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    (found,) = json.loads((out / "results.json").read_text())["targets"]
    return found


def row(found: dict) -> str:
    counts = dict.fromkeys(("PASS", "FAIL", "NOTE", "SKIP"), 0)
    for result in found["properties"]:
        counts[result["status"]] += 1
    what = [
        f"{r['id']} {r['status']}: {r['diagnosis'] or r['reason']}"
        for r in found["properties"]
        if r["status"] in ("FAIL", "NOTE")
    ]
    if found["error"]:
        what.append(found["error"])
    cells = [
        f"`{found['target']}`",
        found["adapter"] or "-",
        *(str(counts[s]) for s in ("PASS", "FAIL", "NOTE", "SKIP")),
        "; ".join(what).replace("|", "\\|") or "nothing",
        f"{found['seconds']:.0f}",
    ]
    return "| " + " | ".join(cells) + " |"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("targets", nargs="*", default=TARGETS)
    parser.add_argument("--output-dir", type=Path)
    parser.add_argument("--option", action="append", default=[], dest="extra")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        output_dir = args.output_dir or Path(folder)
        print(
            "| target | called as | pass | fail | note | skip | what fails (FAIL) or "
            "deviates (NOTE) | s |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for target in args.targets:
            print(row(measure(target, output_dir, args.extra)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
