"""The figures of `triptych train` (matplotlib's Figure, no pyplot).

loss.png              every trainer's loss per step, overlaid (one line when
                      they agree)
agreement.png         each pair's largest parameter difference per step, log
                      scale, with the tolerance of each step
heatmaps_<name>.png   a trainer's attention weights on the first held-out
                      sequence: a row per layer, before and after training,
                      a column per head
"""

from __future__ import annotations

import numpy as np

from shared.train import SHADOW_MULTIPLES, period_of
from triptych.common.plots import finish_line_plot, mode_color
from triptych.train.loop import TrainResults, pair_key, pairs_of

LOSS_FILE = "loss.png"
AGREEMENT_FILE = "agreement.png"
PANEL_INCHES = 2.2


def save_losses(path, results: TrainResults) -> None:
    """loss.png: the loss of each step (before its update), every trainer."""
    from matplotlib.figure import Figure

    c = results.task.config
    fig = Figure(figsize=(9, 4.5))
    ax = fig.subplots()
    steps = [row["step"] for row in results.rows]
    for index, name in enumerate(results.names):
        ax.plot(
            steps,
            [row[f"loss {name}"] for row in results.rows],
            label=name,
            color=mode_color(index),
            linewidth=2.5 if index == 0 else 1.2,
            linestyle="-" if index == 0 else (0, (4, 2 + index)),
        )
    ax.axhline(np.log(c.vocab), color="gray", linestyle=":", linewidth=1)
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats); dotted: log V, a uniform guess")
    ax.set_title(
        f"loss per step, {results.dtype}: V={c.vocab}, T={c.seq_len}, "
        f"C={c.d_model}, H={c.n_heads}, L={c.n_layers}, batch {c.batch}",
        fontsize=9,
    )
    finish_line_plot(fig, ax, path)


LINE_STYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def coinciding_pairs(results: TrainResults) -> tuple[list[list[str]], list[str]]:
    """The pairs as the figure draws them: groups of pairs whose differences
    are the same at every step (one line each), and the pairs that are 0 at
    every step (two trainers equal bit for bit: nothing to draw on a log axis,
    and why the lines of those two with any third coincide)."""
    groups: dict[bytes, list[str]] = {}
    zero = []
    for a, b in pairs_of(results.names):
        key = pair_key(a, b)
        diffs = np.array([row[f"diff {key}"] for row in results.rows])
        if not diffs.any():
            zero.append(key)
        else:
            groups.setdefault(diffs.tobytes(), []).append(key)
    return list(groups.values()), zero


def save_agreement(path, results: TrainResults) -> None:
    """agreement.png: each pair's largest |difference| and the tolerance.

    Every pair the legend lists can be seen: each line has its own colour,
    dashes and markers (set apart along the steps), and pairs whose
    differences are the same at every step are drawn once and named together,
    with why: two trainers equal bit for bit (0 at every step, listed too)
    make the same line with any third."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.5, 4.8))
    ax = fig.subplots()
    steps = [row["step"] for row in results.rows]
    every = max(1, len(steps) // 8)
    groups, zero = coinciding_pairs(results)
    for index, keys in enumerate(groups):
        diffs = np.array([row[f"diff {keys[0]}"] for row in results.rows])
        label = keys[0]
        if len(keys) > 1:
            label = (
                "\n= ".join(keys)
                + f"\n(the same at every step: {len(keys)} lines as one)"
            )
        ax.plot(
            steps,
            np.where(diffs > 0, diffs, np.nan),
            label=label,
            color=mode_color(index),
            linestyle=LINE_STYLES[index % len(LINE_STYLES)],
            marker=MARKERS[index % len(MARKERS)],
            markevery=(index * every // max(1, len(groups)), every),
            markersize=5,
        )
    for key in zero:
        ax.plot([], [], " ", label=f"{key}: 0 at every step (equal bit for bit)")
    for key, label, style in (
        ("shadow_drift", "NumPy vs its shadow", ":"),
        ("tolerance", "tolerance", "--"),
    ):
        values = [row[key] for row in results.rows]
        ax.plot(steps, values, label=label, color="black", linestyle=style)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("largest |parameter difference|")
    n_pairs = sum(len(keys) for keys in groups) + len(zero)
    drawn = (
        f"\n{n_pairs} pairs, {len(groups)} lines: pairs that are the same at every "
        "step are drawn once and named together"
        if len(groups) < n_pairs
        else ""
    )
    ax.set_title(
        f"step for step, {results.dtype}: every pair against the tolerance "
        f"({SHADOW_MULTIPLES[results.dtype]:g} x the drift of NumPy's rounding "
        f"shadow){drawn}",
        fontsize=9,
    )
    finish_line_plot(fig, ax, path)


def save_heatmaps(path, results: TrainResults, name: str) -> None:
    """heatmaps_<name>.png: rows layer 0 before, layer 0 after, layer 1 ...;
    a column per head; the first held-out sequence's tokens on both axes."""
    from matplotlib.figure import Figure

    run = results.runs[name]
    c = results.task.config
    rows = [
        (f"layer {layer}, {when}", weights[layer])
        for layer in range(c.n_layers)
        for when, weights in (
            ("before", run.weights_before),
            ("after", run.weights_after),
        )
    ]
    size = (1.2 + c.n_heads * PANEL_INCHES, 0.9 + len(rows) * PANEL_INCHES)
    fig = Figure(figsize=size, layout="constrained")
    axes = fig.subplots(len(rows), c.n_heads, squeeze=False, sharex=True, sharey=True)
    for (label, weights), row_axes in zip(rows, axes, strict=True):
        for head, ax in enumerate(row_axes):
            image = ax.imshow(weights[head], vmin=0.0, vmax=1.0, cmap="viridis")
            ax.set_title(f"{label}, head {head}", fontsize=8)
            ax.tick_params(labelsize=6)
    for ax in axes[-1]:
        ax.set_xlabel("key position", fontsize=7)
    for ax in axes[:, 0]:
        ax.set_ylabel("query position", fontsize=7)
    fig.colorbar(image, ax=axes, shrink=0.6, label="attention weight")
    accuracy = f"{run.accuracy_before:.2f} -> {run.accuracy_after:.2f}"
    period = int(period_of(results.task.held_out[:1])[0])
    fig.suptitle(
        f"{name}: attention on one held-out sequence (period {period}), before\n"
        f"and after {len(results.rows)} steps; induction accuracy {accuracy}",
        fontsize=9,
    )
    fig.savefig(path, dpi=80)
