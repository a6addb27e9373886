"""The figures of `triptych run`, drawn with matplotlib's Agg renderer.

Each function builds a `matplotlib.figure.Figure` directly (no pyplot, so no
global state and no display needed). The heatmap grids have a fixed layout,
a panel of PANEL_INCHES plus fixed gaps and margins (no layout engine: that is
what keeps a grid of 24 panels fast), so a PNG's size in pixels depends only on
its grid of panels and its tokens; see `grid_inches`. Token labels stay
readable: a panel grows with T (up to MAX_PANEL_INCHES) so that each label
keeps LABEL_POINTS, the margins grow with the longest token, and past what a
panel holds every k-th token is labelled, with its position.

    attention_heatmaps_<backend>.png  one panel per head, tokens on both axes
    attention_diff.png                |a - b| per comparison (rows) and head
                                      (columns), log colours up to the
                                      tolerance: the larger the darker, red
                                      beyond it, white where equal
    entropy.png                       per-head mean entropy per backend beside
                                      the causal maximum, in nats and normalized

The line plots of `triptych bench` and `--memory` build their Figure the same
way and end with `triptych.common.plots.finish_line_plot`.
"""

from __future__ import annotations

import math

import numpy as np

from shared import registry

DPI = 100
PANEL_INCHES = 2.0
GAP_INCHES = (0.25, 0.5)  # between panels: across, down (room for a title)
TITLE_INCHES = 0.08  # from the top edge to the top of the figure's title
MARGIN_INCHES = {"left": 1.25, "right": 1.25, "top": 0.75, "bottom": 0.75}
HEATMAP_COLUMNS = 4
ENTROPY_INCHES = (11.0, 4.0)
ORACLE_COLOR = "dimgrey"  # each backend's colour is the registry's


MAX_PANEL_INCHES = 4.0
LABEL_POINTS = 7.0  # the token labels' font size
LABEL_INCHES = 0.11  # the room one label of LABEL_POINTS takes along an axis
CHAR_INCHES = 0.06  # the width of one character of a label


def panel_inches(labels=()) -> float:
    """A panel's side: PANEL_INCHES, more for a long sentence, so that each
    token's label keeps LABEL_INCHES (up to MAX_PANEL_INCHES)."""
    return min(MAX_PANEL_INCHES, max(PANEL_INCHES, len(labels) * LABEL_INCHES))


def margins(labels=()) -> dict[str, float]:
    """MARGIN_INCHES, the bottom and left widened for the longest token."""
    room = 0.45 + CHAR_INCHES * max((len(t) for t in _tick_labels(labels)), default=0)
    m = dict(MARGIN_INCHES)
    m["bottom"] = max(m["bottom"], room)
    m["left"] = max(m["left"], room + 0.5)  # and the axis' own label
    return m


def grid_inches(n_rows: int, n_columns: int, labels=()) -> tuple[float, float]:
    """(width, height) of a figure with a grid of heatmap panels."""
    across, down = GAP_INCHES
    m = margins(labels)
    panel = panel_inches(labels)
    return (
        m["left"] + n_columns * panel + (n_columns - 1) * across + m["right"],
        m["top"] + n_rows * panel + (n_rows - 1) * down + m["bottom"],
    )


def heatmap_grid(n_heads: int) -> tuple[int, int]:
    """(rows, columns) of the heatmap panels: HEATMAP_COLUMNS heads to a row."""
    n_columns = min(n_heads, HEATMAP_COLUMNS)
    return math.ceil(n_heads / n_columns), n_columns


def _panel_grid(n_rows: int, n_columns: int, title: str, labels):
    """A figure of square panels sharing both axes, and an axis for a colour bar."""
    from matplotlib.figure import Figure

    width, height = grid_inches(n_rows, n_columns, labels)
    m = margins(labels)
    panel = panel_inches(labels)
    fig = Figure(figsize=(width, height), dpi=DPI)
    axes = fig.subplots(
        n_rows,
        n_columns,
        squeeze=False,
        sharex=True,
        sharey=True,
        gridspec_kw={
            "left": m["left"] / width,
            "right": 1 - m["right"] / width,
            "bottom": m["bottom"] / height,
            "top": 1 - m["top"] / height,
            "wspace": GAP_INCHES[0] / panel,
            "hspace": GAP_INCHES[1] / panel,
        },
    )
    colorbar_axis = fig.add_axes(
        (
            1 - (m["right"] - 0.25) / width,
            m["bottom"] / height,
            0.15 / width,
            1 - (m["top"] + m["bottom"]) / height,
        )
    )
    # A fixed distance from the top edge, not matplotlib's fraction of the
    # height: in a tall grid that fraction drops a two-line title onto the
    # panels' own titles.
    fig.suptitle(title, fontsize="medium", y=1 - TITLE_INCHES / height, va="top")
    return fig, axes, colorbar_axis


def save_heatmaps(
    path, weights: np.ndarray, labels: list[str], title: str, roles=None
) -> None:
    """One panel per head of (H, T, T) weights, as the original build
    script drew them; each panel titled with its head's role if `roles`."""
    H = weights.shape[0]
    n_rows, n_columns = heatmap_grid(H)
    fig, axes, colorbar_axis = _panel_grid(n_rows, n_columns, title, labels)
    image = None
    for h, ax in enumerate(axes.flat):
        if h >= H:
            ax.set_axis_off()
            continue
        image = ax.imshow(weights[h], vmin=0.0, vmax=1.0, cmap="viridis")
        ax.set_title(f"head {h}" if roles is None else f"head {h}: {roles[h]}")
    _token_axes(axes, labels)
    for ax in axes[:, 0]:
        ax.set_ylabel("query")
    fig.colorbar(image, cax=colorbar_axis, label="attention weight")
    fig.savefig(path, dpi=DPI)


def save_differences(
    path,
    differences: dict[str, np.ndarray],
    labels: list[str],
    atol: float,
    dtype: str,
) -> None:
    """|a - b| of (H, T, T) weights, one row of panels per comparison.

    The colour scale is logarithmic from atol * 1e-6 to atol, the tolerance of
    the dtype, from faint to dark: the eye goes to the largest differences,
    red (above the top) is a real difference, the smallest rounding is nearly
    white, and entries that are exactly equal (the masked ones among them) are
    white.
    """
    from matplotlib import colormaps
    from matplotlib.colors import LogNorm

    H = next(iter(differences.values())).shape[0]
    fig, axes, colorbar_axis = _panel_grid(
        len(differences),
        H,
        f"Where the attention weights differ ({dtype}): the darker, the larger\n"
        f"blue up to the tolerance {atol:g}, red beyond it, white where equal",
        labels,
    )
    cmap = colormaps["Blues"].with_extremes(bad="white", over="red", under="white")
    norm = LogNorm(vmin=atol * 1e-6, vmax=atol)
    image = None
    for row, (name, difference) in zip(axes, differences.items(), strict=True):
        for h, ax in enumerate(row):
            exact = np.ma.masked_equal(difference[h], 0.0)  # grey where equal
            image = ax.imshow(exact, norm=norm, cmap=cmap)
        row[0].set_ylabel(name, fontsize="medium")
    for h, ax in enumerate(axes[0]):
        ax.set_title(f"head {h}")
    _token_axes(axes, labels)
    bar = fig.colorbar(image, cax=colorbar_axis, extend="max")
    bar.ax.set_title("|a - b|", fontsize="medium", pad=14)  # above: the side is
    # the tolerance's label
    # the tolerance marked at the top: its own tick, the powers of 10 below it
    decades = [10.0**k for k in range(-30, 5) if atol * 1e-6 <= 10.0**k < atol / 3]
    bar.set_ticks(
        [*decades, atol],
        labels=[f"1e{round(math.log10(d))}" for d in decades] + [f"tol. {atol:g}"],
    )
    bar.ax.minorticks_off()
    bar.ax.get_yticklabels()[-1].set_color("red")
    fig.savefig(path, dpi=DPI)


def save_entropy(path, entropy: dict[str, np.ndarray]) -> None:
    """Per-head mean entropy of each backend beside the causal maximum.

    Args:
        path: where to save the PNG.
        entropy: (H, T) per-row entropy in nats, by backend name (and 'oracle').
    """
    from matplotlib.figure import Figure

    from triptych.run.results import ORACLE, causal_max_mean, summarize_entropy

    names = list(entropy)
    H, T = next(iter(entropy.values())).shape
    fig = Figure(figsize=ENTROPY_INCHES, dpi=DPI, layout="constrained")
    nats_ax, causal_ax = fig.subplots(1, 2)
    heads = np.arange(H)
    width = 0.8 / len(names)
    colors = {f.name: f.color for f in registry.frameworks()} | {ORACLE: ORACLE_COLOR}
    for n, name in enumerate(names):
        summary = summarize_entropy(entropy[name])
        offset = heads - 0.4 + (n + 0.5) * width
        color = colors.get(name)
        nats_ax.bar(offset, summary.mean_nats, width, label=name, color=color)
        if summary.over_causal is not None:
            causal_ax.bar(offset, summary.over_causal, width, color=color)
    nats_ax.axhline(
        causal_max_mean(T), color="black", linestyle="--", label="causal maximum"
    )
    nats_ax.axhline(math.log(T), color="grey", linestyle=":", label="log T")
    nats_ax.set_title("mean row entropy (nats)")
    causal_ax.axhline(1.0, color="black", linestyle="--")
    causal_ax.set_title("entropy / log(i+1), rows 1..T-1")
    if T == 1:
        causal_ax.text(0.5, 0.5, "T = 1: no row has a choice", ha="center")
    # numbers under an axis label ("head h" runs together from 8 heads on), and
    # at most 12 of them: two digits run together from about 20
    labelled = heads[:: math.ceil(H / 12)]
    for ax in (nats_ax, causal_ax):
        ax.set_xticks(labelled, [str(h) for h in labelled])
        ax.set_xlabel("head")
    fig.legend(handles=nats_ax.get_legend_handles_labels()[0], loc="outside right")
    fig.suptitle(f"Entropy per head (T = {T})")
    fig.savefig(path, dpi=DPI)


def _tick_labels(labels) -> list[str]:
    """The labels the axes show: every token where the panel holds them all,
    else every k-th, with its position ("12 mat")."""
    step = _label_step(labels)
    if step == 1:
        return list(labels)
    return [f"{i} {t}" for i, t in enumerate(labels)][::step]


def _label_step(labels) -> int:
    """Label every k-th token: k = 1 while LABEL_INCHES each fit the panel."""
    return max(1, math.ceil(len(labels) * LABEL_INCHES / panel_inches(labels)))


def _token_axes(axes, labels: list[str]) -> None:
    """Token labels on the outer panels of a shared grid: keys along x, queries
    along y, at LABEL_POINTS, every k-th where a panel cannot hold them all
    (`_tick_labels`). A panel with no panel below it (a short last row) keeps
    its own."""
    T = len(labels)
    step = _label_step(labels)
    positions = range(0, T, step)
    n_rows, n_columns = axes.shape
    axes[0, 0].set_xticks(positions, _tick_labels(labels))  # shared by every panel
    axes[0, 0].set_yticks(positions, _tick_labels(labels))
    for row in range(n_rows):
        for column in range(n_columns):
            ax = axes[row, column]
            below = axes[row + 1, column] if row + 1 < n_rows else None
            if below is None or not below.axison:
                ax.xaxis.set_tick_params(labelbottom=True)
                ax.set_xlabel("key")
            ax.tick_params(axis="x", labelrotation=90, labelsize=LABEL_POINTS)
            ax.tick_params(axis="y", labelsize=LABEL_POINTS)
