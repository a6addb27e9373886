"""Golden files: the oracle's results for every preset, saved as .npz.

    python -m shared.golden            # regenerate shared/fixtures/<preset>.npz
    python -m shared.golden --check    # recompute and compare, exit 1 on drift

Each file holds the preset's float64 inputs and parameters (x, w_q, w_k, w_v,
w_o) and what `shared.reference` computes from them:

    single_out (..., T, C), single_weights (..., T, T), single_entropy (..., T)
        single-head attention with D = C, using w_q, w_k, w_v whole;
    multi_out (..., T, C), multi_weights (..., H, T, T), multi_entropy (..., H, T)
        multi-head attention with the preset's n_heads and w_o.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from shared.config import PRESETS, Preset
from shared.fixture import Fixture, make_fixture
from shared.reference import (
    reference_entropy,
    reference_multi_head,
    reference_single_head,
)
from shared.tolerances import is_close, max_abs_diff

GOLDEN_DIR = Path(__file__).parent / "fixtures"


def oracle_results(fixture: Fixture) -> dict[str, np.ndarray]:
    """Everything the oracle computes from a float64 fixture, by name.

    Returns:
        single_out (..., T, C), single_weights (..., T, T), single_entropy
        (..., T): one head with w_q, w_k, w_v whole (D = C), and b_q, b_k,
        b_v if the fixture has them (`Fixture.single_head`); multi_out
        (..., T, C), multi_weights (..., H, T, T), multi_entropy (..., H, T):
        the preset's n_heads and w_o, and the fixture's variant.
    """
    f = fixture
    weights, single_biases = f.single_head
    single_out, single_weights = reference_single_head(
        f.x, *weights.values(), biases=single_biases
    )
    multi_out, multi_weights = reference_multi_head(
        f.x, *f.params.values(), f.preset.n_heads, biases=f.biases, variant=f.variant
    )
    return {
        "single_out": single_out,
        "single_weights": single_weights,
        "single_entropy": reference_entropy(single_weights),
        "multi_out": multi_out,
        "multi_weights": multi_weights,
        "multi_entropy": reference_entropy(multi_weights),
    }


def compute_golden(preset: Preset) -> dict[str, np.ndarray]:
    """Run the oracle on the preset's fixture; return every array by name."""
    fixture = make_fixture(preset)
    return {"x": fixture.x, **fixture.params, **oracle_results(fixture)}


def golden_path(name: str) -> Path:
    """Where the golden file of preset `name` lives."""
    return GOLDEN_DIR / f"{name}.npz"


def load_golden(name: str) -> dict[str, np.ndarray]:
    """The committed golden arrays of preset `name`."""
    with np.load(golden_path(name)) as data:
        return {key: data[key] for key in data.files}


def save_golden(preset: Preset) -> Path:
    """Compute and write the golden file of `preset`."""
    path = golden_path(preset.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **compute_golden(preset))
    return path


def drift(preset: Preset) -> dict[str, float]:
    """Arrays whose committed values differ from a fresh oracle run (float64 table)."""
    fresh, committed = compute_golden(preset), load_golden(preset.name)
    changed = {}
    for key in fresh.keys() | committed.keys():
        if key not in fresh or key not in committed:
            changed[key] = float("inf")
        elif not is_close(committed[key], fresh[key], "float64"):
            changed[key] = max_abs_diff(committed[key], fresh[key])
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m shared.golden",
        description="Regenerate (or check) the golden files in shared/fixtures/.",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="compare the committed files with a fresh oracle run instead of writing",
    )
    args = parser.parse_args(argv)
    failed = False
    for preset in PRESETS.values():
        if args.check:
            changed = drift(preset)
            failed |= bool(changed)
            print(f"{preset.name}: " + (f"DRIFT {changed}" if changed else "matches"))
        else:
            print(f"wrote {save_golden(preset)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
