"""The figures of `triptych run`, drawn with matplotlib's Agg renderer.

Each function builds a `matplotlib.figure.Figure` directly (no pyplot, so no
global state and no display needed) and saves a PNG whose size in pixels
depends only on the grid of panels: PANEL_INCHES per panel plus fixed margins,
at DPI dots per inch.

    attention_heatmaps_<backend>.png  one panel per head, tokens on both axes
    attention_diff.png                |a - b| per comparison (rows) and head
                                      (columns), log colours up to the tolerance
    entropy.png                       per-head mean entropy per backend beside
                                      the causal maximum, in nats and normalized
"""

from __future__ import annotations

import math

import numpy as np

DPI = 100
PANEL_INCHES = 2.5
HEATMAP_COLUMNS = 4
MARGIN_WIDTH_INCHES = 1.5  # colour bar and row labels
MARGIN_HEIGHT_INCHES = 0.8  # figure title
ENTROPY_INCHES = (11.0, 4.0)
COLORS = {
    "numpy": "tab:blue",
    "torch": "tab:orange",
    "jax": "tab:green",
    "oracle": "dimgrey",
}


def grid_inches(n_rows: int, n_columns: int) -> tuple[float, float]:
    """Figure size of a grid of heatmap panels."""
    return (
        n_columns * PANEL_INCHES + MARGIN_WIDTH_INCHES,
        n_rows * PANEL_INCHES + MARGIN_HEIGHT_INCHES,
    )


def heatmap_grid(n_heads: int) -> tuple[int, int]:
    """(rows, columns) of the heatmap panels: HEATMAP_COLUMNS heads to a row."""
    n_columns = min(n_heads, HEATMAP_COLUMNS)
    return math.ceil(n_heads / n_columns), n_columns


def save_heatmaps(path, weights: np.ndarray, labels: list[str], title: str) -> None:
    """One panel per head of (H, T, T) weights, as the seed drew them."""
    from matplotlib.figure import Figure

    H = weights.shape[0]
    n_rows, n_columns = heatmap_grid(H)
    fig = Figure(figsize=grid_inches(n_rows, n_columns), dpi=DPI, layout="constrained")
    axes = fig.subplots(n_rows, n_columns, squeeze=False)
    image = None
    for h, ax in enumerate(axes.flat):
        if h >= H:
            ax.set_axis_off()
            continue
        image = ax.imshow(weights[h], vmin=0.0, vmax=1.0, cmap="viridis")
        ax.set_title(f"head {h}")
        _token_axes(ax, labels)
    fig.colorbar(image, ax=axes, label="attention weight", shrink=0.9)
    fig.suptitle(title)
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
    from matplotlib.figure import Figure

    H = next(iter(differences.values())).shape[0]
    n_rows = len(differences)
    fig = Figure(figsize=grid_inches(n_rows, H), dpi=DPI, layout="constrained")
    axes = fig.subplots(n_rows, H, squeeze=False)
    cmap = colormaps["magma"].with_extremes(bad="lightgrey", over="red", under="black")
    norm = LogNorm(vmin=atol * 1e-6, vmax=atol)
    image = None
    for row, (name, difference) in zip(axes, differences.items(), strict=True):
        for h, ax in enumerate(row):
            exact = np.ma.masked_equal(difference[h], 0.0)  # grey where equal
            image = ax.imshow(exact, norm=norm, cmap=cmap)
            ax.set_title(f"head {h}")
            _token_axes(ax, labels)
        row[0].set_ylabel(f"{name}\nquery", fontsize="small")
    fig.colorbar(
        image,
        ax=axes,
        extend="both",
        shrink=0.9,
        label=f"|a - b| (top = {dtype} atol {atol:g}; grey = exactly equal)",
    )
    fig.suptitle(f"Where the attention weights differ ({dtype})")
    fig.savefig(path, dpi=DPI)


def save_entropy(path, entropy: dict[str, np.ndarray]) -> None:
    """Per-head mean entropy of each backend beside the causal maximum.

    Args:
        path: where to save the PNG.
        entropy: (H, T) per-row entropy in nats, by backend name (and 'oracle').
    """
    from matplotlib.figure import Figure

    from triptych.results import causal_max_mean, summarize_entropy

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
    for ax in (nats_ax, causal_ax):
        ax.set_xticks(heads, [f"head {h}" for h in heads])
    fig.legend(handles=nats_ax.get_legend_handles_labels()[0], loc="outside right")
    fig.suptitle(f"Entropy per head (T = {T})")
    fig.savefig(path, dpi=DPI)


def _token_axes(ax, labels: list[str]) -> None:
    """Token labels on both axes: keys along x, queries along y."""
    T = len(labels)
    size = max(4.0, min(8.0, 160.0 / T))
    ax.set_xticks(range(T), labels, rotation=90, fontsize=size)
    ax.set_yticks(range(T), labels, fontsize=size)
