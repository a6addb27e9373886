"""The figures of `triptych run`, drawn with matplotlib's Agg renderer.

Each function builds a `matplotlib.figure.Figure` directly (no pyplot, so no
global state and no display needed). The heatmap grids have a fixed layout,
PANEL_INCHES per panel plus fixed gaps and margins (no layout engine: that is
what keeps a grid of 24 panels fast), so a PNG's size in pixels depends only on
its grid of panels; see `grid_inches`.

    attention_heatmaps_<backend>.png  one panel per head, tokens on both axes
    attention_diff.png                |a - b| per comparison (rows) and head
                                      (columns), log colours up to the tolerance
    entropy.png                       per-head mean entropy per backend beside
                                      the causal maximum, in nats and normalized

The line plots of `triptych bench` and `--memory` build their Figure the same
way and end with `triptych.common.plots.finish_line_plot`.
"""

from __future__ import annotations

import math

import numpy as np

DPI = 100
PANEL_INCHES = 2.0
GAP_INCHES = (0.25, 0.5)  # between panels: across, down (room for a title)
TITLE_INCHES = 0.08  # from the top edge to the top of the figure's title
MARGIN_INCHES = {"left": 1.25, "right": 1.25, "top": 0.75, "bottom": 0.75}
HEATMAP_COLUMNS = 4
ENTROPY_INCHES = (11.0, 4.0)
COLORS = {
    "numpy": "tab:blue",
    "torch": "tab:orange",
    "jax": "tab:green",
    "oracle": "dimgrey",
}


def grid_inches(n_rows: int, n_columns: int) -> tuple[float, float]:
    """(width, height) of a figure with a grid of heatmap panels."""
    across, down = GAP_INCHES
    m = MARGIN_INCHES
    return (
        m["left"] + n_columns * PANEL_INCHES + (n_columns - 1) * across + m["right"],
        m["top"] + n_rows * PANEL_INCHES + (n_rows - 1) * down + m["bottom"],
    )


def heatmap_grid(n_heads: int) -> tuple[int, int]:
    """(rows, columns) of the heatmap panels: HEATMAP_COLUMNS heads to a row."""
    n_columns = min(n_heads, HEATMAP_COLUMNS)
    return math.ceil(n_heads / n_columns), n_columns


def _panel_grid(n_rows: int, n_columns: int, title: str):
    """A figure of square panels sharing both axes, and an axis for a colour bar."""
    from matplotlib.figure import Figure

    width, height = grid_inches(n_rows, n_columns)
    m = MARGIN_INCHES
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
            "wspace": GAP_INCHES[0] / PANEL_INCHES,
            "hspace": GAP_INCHES[1] / PANEL_INCHES,
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


def save_heatmaps(path, weights: np.ndarray, labels: list[str], title: str) -> None:
    """One panel per head of (H, T, T) weights, as the original build
    script drew them."""
    H = weights.shape[0]
    n_rows, n_columns = heatmap_grid(H)
    fig, axes, colorbar_axis = _panel_grid(n_rows, n_columns, title)
    image = None
    for h, ax in enumerate(axes.flat):
        if h >= H:
            ax.set_axis_off()
            continue
        image = ax.imshow(weights[h], vmin=0.0, vmax=1.0, cmap="viridis")
        ax.set_title(f"head {h}")
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
    the dtype: colour is rounding, red (above the top) would be a real
    difference, and grey marks entries that are exactly equal.
    """
    from matplotlib import colormaps
    from matplotlib.colors import LogNorm

    H = next(iter(differences.values())).shape[0]
    fig, axes, colorbar_axis = _panel_grid(
        len(differences),
        H,
        f"Where the attention weights differ ({dtype})\n"
        f"colour up to the tolerance {atol:g}; red above; grey equal",
    )
    cmap = colormaps["magma"].with_extremes(bad="lightgrey", over="red", under="black")
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
    fig.colorbar(image, cax=colorbar_axis, extend="both", label="|a - b|")
    fig.savefig(path, dpi=DPI)


def save_entropy(path, entropy: dict[str, np.ndarray]) -> None:
    """Per-head mean entropy of each backend beside the causal maximum.

    Args:
        path: where to save the PNG.
        entropy: (H, T) per-row entropy in nats, by backend name (and 'oracle').
    """
    from matplotlib.figure import Figure

    from triptych.run.results import causal_max_mean, summarize_entropy

    names = list(entropy)
    H, T = next(iter(entropy.values())).shape
    fig = Figure(figsize=ENTROPY_INCHES, dpi=DPI, layout="constrained")
    nats_ax, causal_ax = fig.subplots(1, 2)
    heads = np.arange(H)
    width = 0.8 / len(names)
    for n, name in enumerate(names):
        summary = summarize_entropy(entropy[name])
        offset = heads - 0.4 + (n + 0.5) * width
        color = COLORS.get(name)
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


def _token_axes(axes, labels: list[str]) -> None:
    """Token labels on the outer panels of a shared grid: keys along x, queries
    along y. A panel with no panel below it (a short last row) keeps its own."""
    T = len(labels)
    size = max(3.0, min(8.0, 110.0 / T))
    n_rows, n_columns = axes.shape
    axes[0, 0].set_xticks(range(T), labels)  # shared by every panel
    axes[0, 0].set_yticks(range(T), labels)
    for row in range(n_rows):
        for column in range(n_columns):
            ax = axes[row, column]
            below = axes[row + 1, column] if row + 1 < n_rows else None
            if below is None or not below.axison:
                ax.xaxis.set_tick_params(labelbottom=True)
                ax.set_xlabel("key")
            ax.tick_params(axis="x", labelrotation=90, labelsize=size)
            ax.tick_params(axis="y", labelsize=size)
