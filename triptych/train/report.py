"""The files of `triptych train`, and what it prints.

    results.json  FORMAT, described by docs/train.schema.json
    steps.csv     one row per step (triptych.train.loop.row_fields)
    summary.md    the run on one page: agreement, accuracy, times
    loss.png, agreement.png, heatmaps_<trainer>.png (triptych.train.plots)

On a NaN loss every file is still written, with the steps done before it.
"""

from __future__ import annotations

import datetime
import json
import math
import shlex
import statistics
import sys
from pathlib import Path
from typing import Any

from shared.tolerances import tolerance
from shared.train import SHADOW_MULTIPLES
from triptych.common.backends import versions
from triptych.common.files import write_csv
from triptych.common.prose import echo
from triptych.common.tables import Table, as_rich, as_text, number
from triptych.common.training import TRAINERS
from triptych.train import plots
from triptych.train.loop import TrainResults, pair_key, pairs_of, row_fields

FORMAT = "triptych-train/1"
CSV_FILE = "steps.csv"
PARTIAL_FILE = "steps.partial.csv"
"""Where Ctrl-C keeps the steps done so far; a complete run removes it."""
SUMMARY_FILE = "summary.md"
JSON_FILE = "results.json"


def heatmap_file(name: str) -> str:
    return f"heatmaps_{name}.png"


ALL_FILES = (
    JSON_FILE,
    CSV_FILE,
    SUMMARY_FILE,
    plots.LOSS_FILE,
    plots.AGREEMENT_FILE,
    *(heatmap_file(name) for name in TRAINERS),
    PARTIAL_FILE,
)
"""Every file this command writes in some run (what a run that did not write
one of them removes)."""


def stale_files(written: list[str]) -> list[str]:
    """Our files of an earlier run that this run did not write."""
    return [name for name in ALL_FILES if name not in written]


def command_line(results: TrainResults, args) -> str:
    """The command that repeats this run, every setting spelled out."""
    c = results.task.config
    backend_names = dict.fromkeys(TRAINERS[name].backend for name in results.names)
    parts = [
        "triptych", "train",
        "--steps", str(c.steps),
        "--backends", ",".join(backend_names),
        "--dtype", results.dtype,
        "--compiled" if args.compiled else "--eager",
        "--vocab", str(c.vocab),
        "--seq-len", str(c.seq_len),
        "--d-model", str(c.d_model),
        "--n-heads", str(c.n_heads),
        "--n-layers", str(c.n_layers),
        "--batch", str(c.batch),
        "--lr", repr(c.lr),
        "--seed", str(c.seed),
        "--threads", str(args.threads),
    ]  # fmt: skip
    return shlex.join(parts)


def trainer_summary(results: TrainResults, name: str) -> dict[str, Any]:
    """One trainer's line of results.json: what it is, its times, what it learned."""
    kind, run = TRAINERS[name], results.runs[name]
    steps = run.step_s
    median = statistics.median(steps[1:]) if len(steps) > 1 else None
    losses = [row[f"loss {name}"] for row in results.rows]
    return {
        "name": name,
        "backend": kind.backend,
        "compiled": kind.compiled,
        "summary": kind.summary,
        "steps_done": len(results.rows),
        "first_step_s": steps[0] if steps else None,
        "median_step_s": median,
        "steps_per_s": None if not median else 1 / median,
        "compile_s": steps[0] - median if kind.compiled and median else None,
        "total_s": sum(steps),
        "first_loss": losses[0] if losses else None,
        "final_loss": losses[-1] if losses else None,
        "accuracy_before": run.accuracy_before,
        "accuracy_after": run.accuracy_after,
    }


def document(results: TrainResults, not_installed, args, files) -> dict[str, Any]:
    """results.json."""
    c = results.task.config
    outside = results.first_outside()
    pairs = []
    for a, b in pairs_of(results.names):
        key = pair_key(a, b)
        diffs = [row[f"diff {key}"] for row in results.rows]
        pairs.append(
            {
                "pair": key,
                "max_difference": max(diffs, default=None),
                "final_difference": diffs[-1] if diffs else None,
                "first_step_outside": outside[key],
            }
        )
    rows = results.rows
    return {
        "format": FORMAT,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": command_line(results, args),
        "verdict": "PASS" if results.agree else "FAIL",
        "config": {
            "vocab": c.vocab,
            "seq_len": c.seq_len,
            "d_model": c.d_model,
            "n_heads": c.n_heads,
            "n_layers": c.n_layers,
            "batch": c.batch,
            "steps": c.steps,
            "lr": c.lr,
            "b1": c.b1,
            "b2": c.b2,
            "eps": c.eps,
            "seed": c.seed,
            "held_out": c.held_out,
            "dtype": results.dtype,
            "compiled": args.compiled,
            "threads": args.threads,
        },
        "versions": versions(),
        "not_installed": list(not_installed),
        "chance_accuracy": 1 / c.vocab,
        "trainers": [trainer_summary(results, name) for name in results.names],
        "tolerance": {
            "multiple": SHADOW_MULTIPLES[results.dtype],
            "floor": tolerance(results.dtype).atol,
            "final": rows[-1]["tolerance"] if rows else None,
        },
        "agreement": {"agree": results.agree, "pairs": pairs},
        "nan": results.nan,
        "steps": {
            "step": [r["step"] for r in rows],
            "tolerance": [r["tolerance"] for r in rows],
            "shadow_drift": [r["shadow_drift"] for r in rows],
            "loss": {n: [r[f"loss {n}"] for r in rows] for n in results.names},
            "difference": {
                pair_key(a, b): [r[f"diff {pair_key(a, b)}"] for r in rows]
                for a, b in pairs_of(results.names)
            },
        },
        "files": files,
    }


def finite(value):
    """`value` with every NaN or infinite float made None (JSON has neither)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def write_files(
    directory: Path, results: TrainResults, not_installed, args
) -> tuple[list[str], dict[str, Any]]:
    """Every file of the run into `directory` (the staging folder); the names
    written and results.json's document."""
    files = {
        JSON_FILE: "everything, per step too (docs/train.schema.json)",
        CSV_FILE: "one row per step: each loss, each pair's difference, the tolerance",
        SUMMARY_FILE: "the run on one page",
    }
    if results.rows:
        plots.save_losses(directory / plots.LOSS_FILE, results)
        files[plots.LOSS_FILE] = "every trainer's loss per step, overlaid"
        plots.save_agreement(directory / plots.AGREEMENT_FILE, results)
        files[plots.AGREEMENT_FILE] = "each pair's largest difference and the tolerance"
    for name in results.names:
        run = results.runs[name]
        if run.weights_after:
            plots.save_heatmaps(directory / heatmap_file(name), results, name)
            files[heatmap_file(name)] = f"{name}'s attention before and after training"
    write_csv(directory / CSV_FILE, row_fields(results.names), results.rows)
    doc = finite(document(results, not_installed, args, files))
    (directory / JSON_FILE).write_text(json.dumps(doc, indent=2) + "\n")
    (directory / SUMMARY_FILE).write_text(markdown(doc))
    return list(files), doc


def verdict_line(doc: dict[str, Any]) -> str:
    """One line: agreement, and where it was lost."""
    if doc["nan"]:
        nan = doc["nan"]
        return (
            f"FAIL: the loss of {nan['trainer']} is NaN at step {nan['step']}; "
            f"training stopped there ({nan['step'] - 1} steps done)"
        )
    outside = [p for p in doc["agreement"]["pairs"] if p["first_step_outside"]]
    dtype = doc["config"]["dtype"]
    if not doc["agreement"]["pairs"]:
        return f"PASS: NumPy alone trained {doc['config']['steps']} steps (no pair)"
    if not outside:
        return (
            f"PASS: every pair within the {dtype} tolerance at every one of "
            f"{doc['config']['steps']} steps"
        )
    first = ", ".join(f"{p['pair']} at step {p['first_step_outside']}" for p in outside)
    return f"FAIL: beyond the {dtype} tolerance first: {first}"


def markdown(doc: dict[str, Any]) -> str:
    """summary.md."""
    c = doc["config"]
    lines = [
        f"## triptych train, {doc['created']}",
        "",
        f"`{doc['command']}`",
        "",
        f"**{verdict_line(doc)}**",
        "",
        f"- model: V={c['vocab']}, T={c['seq_len']}, C={c['d_model']}, "
        f"H={c['n_heads']}, L={c['n_layers']}; batch {c['batch']}, {c['steps']} "
        f"steps of Adam (lr {c['lr']:g}), {c['dtype']}, {c['threads']} thread(s)",
        f"- induction accuracy on {c['held_out']} held-out sequences; chance "
        f"{doc['chance_accuracy']:.3f}",
        f"- tolerance at a step: {doc['tolerance']['multiple']:g} x the largest drift "
        "so far of NumPy's shadow run (each parameter moved one unit in the last "
        f"place before every step), at least {doc['tolerance']['floor']:g}",
        "",
        "| trainer | what | accuracy before | after | first loss | final loss "
        "| first step s | median step ms | compile s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for t in doc["trainers"]:
        median_ms = None if t["median_step_s"] is None else t["median_step_s"] * 1e3
        cells = [
            t["name"],
            t["summary"],
            number(t["accuracy_before"], ".3f"),
            number(t["accuracy_after"], ".3f"),
            number(t["first_loss"], ".4f"),
            number(t["final_loss"], ".4f"),
            number(t["first_step_s"]),
            number(median_ms),
            number(t["compile_s"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Final tolerance {number(doc['tolerance']['final'])}.",
        "",
        "| pair | largest difference | at the last step | first step beyond |",
        "|---|---:|---:|---:|",
    ]
    for p in doc["agreement"]["pairs"]:
        lines.append(
            f"| {p['pair']} | {number(p['max_difference'])} | "
            f"{number(p['final_difference'])} | {p['first_step_outside'] or 'none'} |"
        )
    if doc["not_installed"]:
        lines += ["", f"Not installed: {', '.join(doc['not_installed'])}."]
    return "\n".join(lines) + "\n"


def tables(doc: dict[str, Any]) -> list[Table]:
    """What the console shows: each trainer, and each pair's agreement."""
    trainers = Table(
        "Each trainer",
        ["trainer", "accuracy", "first loss", "final loss", "first step s", "step ms"],
        "lrrrrr",
        caption="accuracy: induction accuracy on the held-out sequences, before -> "
        f"after (chance {doc['chance_accuracy']:.3f}); first step: with any "
        "trace and compile; step ms: the median of the others",
    )
    for t in doc["trainers"]:
        median_ms = None if t["median_step_s"] is None else t["median_step_s"] * 1e3
        before, after = (
            number(t[k], ".3f") for k in ("accuracy_before", "accuracy_after")
        )
        trainers.rows.append(
            [
                t["name"],
                f"{before} -> {after}",
                number(t["first_loss"], ".4f"),
                number(t["final_loss"], ".4f"),
                number(t["first_step_s"]),
                number(median_ms),
            ]
        )
    pairs = Table(
        "Step for step",
        ["pair", "largest difference", "last step", "first step beyond"],
        "lrrr",
        caption=f"tolerance after the last step: {number(doc['tolerance']['final'])} "
        f"({doc['tolerance']['multiple']:g} x the drift of NumPy's rounding shadow)",
    )
    for p in doc["agreement"]["pairs"]:
        pairs.rows.append(
            [
                p["pair"],
                number(p["max_difference"]),
                number(p["final_difference"]),
                str(p["first_step_outside"] or "none"),
            ]
        )
    return [trainers, pairs] if pairs.rows else [trainers]


def print_header(config, args) -> None:
    """What runs, on stdout before the training starts (not with --quiet):
    the sizes, the steps, the dtype, compiled or eager."""
    if not args.quiet:
        echo(
            f"triptych train: V={config.vocab}, T={config.seq_len}, "
            f"C={config.d_model}, H={config.n_heads}, L={config.n_layers}, batch "
            f"{config.batch}, {config.steps} steps, {args.dtype}, "
            + ("compiled" if args.compiled else "eager")
        )


def print_outcome(doc: dict[str, Any], args, written: list[str]) -> None:
    """The tables and the verdict (with --quiet, the verdict alone) on
    stdout; a NaN's line on stderr."""
    from rich.console import Console

    console = Console(highlight=False)
    if not args.quiet:
        for table in tables(doc):
            if console.is_terminal:
                console.print(as_rich(table))
            else:
                print(as_text(table) + "\n")
    if console.is_terminal:
        style = "bold green" if doc["verdict"] == "PASS" else "bold red"
        console.print(verdict_line(doc), style=style, markup=False)
    else:
        print(verdict_line(doc))
    if not args.quiet:
        echo("wrote " + ", ".join(str(args.output_dir / name) for name in written))
    if doc["nan"]:
        nan = doc["nan"]
        print(
            f"triptych train: the loss of {nan['trainer']} is NaN at step "
            f"{nan['step']}: stopped; the {nan['step'] - 1} steps before are "
            f"written to {args.output_dir}",
            file=sys.stderr,
        )
