"""What every line plot of `triptych` shares: a colour per line, and the last
steps (grid, legend, layout, save). A plot builds a `matplotlib.figure.Figure`
directly (no pyplot: no global state, no display needed) and imports matplotlib
inside the function, so that a command's module imports quickly."""

from __future__ import annotations

LINE_PLOT_DPI = 120


def mode_color(index: int):
    """A distinct colour for each of up to 20 lines: tab20's dark shades for the
    first ten, then its light ones (tab10 alone repeats after ten)."""
    from matplotlib import colormaps

    return colormaps["tab20"]((2 * index + (index // 10)) % 20)


def finish_line_plot(fig, ax, path) -> None:
    """The last steps of a line plot: grid, legend, tight layout, save as PNG.

    The legend stands to the right of the axes: a dozen modes leave no corner
    inside them where it hides no line. tight_layout narrows the axes to make
    room for it, so a figure is made about 2 inches wider than its axes.
    """
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # a sweep whose every point was skipped
        ax.legend(
            fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1), borderaxespad=0
        )
    fig.tight_layout()
    fig.savefig(path, dpi=LINE_PLOT_DPI)


def plain_log_ticks(axis) -> None:
    """Ticks of a log axis at 1, 2 and 5 times each power of 10, read as plain
    numbers (0.5, 1, 2, 10), not as powers of 10; `axis` is ax.xaxis or
    ax.yaxis of an axis already on a log scale."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())
