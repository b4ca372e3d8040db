"""Report figures as PNG bytes: per-category bars and a transformation × metric heatmap.

Figures are built on `matplotlib.figure.Figure` with the Agg canvas, never through pyplot, so no global
backend or figure registry is touched and nothing needs a display. matplotlib is imported only when a
figure is drawn: it costs about a second, and importing `quench.robustness` for the metrics should not.
"""

from __future__ import annotations

import io
import math

from typing import TYPE_CHECKING

import numpy as np

from quench.robustness.metrics import GroupMetrics, RobustnessMetrics

if TYPE_CHECKING:
    from matplotlib.figure import Figure

CATEGORY_LABEL = {
    "docstring": "Docstring", "function_name": "Function name", "code_syntax": "Code syntax",
    "code_format": "Code format",
}
NOMINAL_COLOR = "#9ecae1"
ROBUST_COLOR = "#08519c"
DROP_COLOR = "#cb181d"
RELATIVE_COLOR = "#fd8d3c"


def category_label(category: str) -> str:
    return CATEGORY_LABEL.get(category, category.replace("_", " ").capitalize())


def _figure(width: float, height: float) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height))
    FigureCanvasAgg(figure)
    return figure


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return buffer.getvalue()


def _percent(value: float | None) -> float:
    return math.nan if value is None else 100.0 * value


def _grouped_bars(
    groups: tuple[GroupMetrics, ...], series: list[tuple[str, list[float], str]], ylabel: str, title: str
) -> bytes:
    """Bars per category, one colour per series; NaN bars are left out and labelled n/a."""
    figure = _figure(7.5, 3.8)
    axes = figure.add_subplot()
    x = np.arange(len(groups))
    width = 0.8 / len(series)
    for i, (label, values, color) in enumerate(series):
        positions = x - 0.4 + width * (i + 0.5)
        heights = [0.0 if math.isnan(v) else v for v in values]
        bars = axes.bar(positions, heights, width, label=label, color=color)
        texts = ["n/a" if math.isnan(v) else f"{v:.1f}" for v in values]
        axes.bar_label(bars, labels=texts, padding=2, fontsize=8)
    axes.set_xticks(x, [category_label(g.category) for g in groups])
    axes.set_ylabel(ylabel)
    axes.set_title(title, fontsize=11)
    shown = [v for _, values, _ in series for v in values if not math.isnan(v)]
    # RD can be negative (a perturbation fixed problems) and RR can pass 100 for k > 1.
    axes.set_ylim(min([0.0] + shown) * 1.15, max([100.0] + shown) * 1.1)
    axes.axhline(0, color="#444444", linewidth=0.8)
    axes.legend(frameon=False, fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncols=len(series))
    axes.spines[["top", "right"]].set_visible(False)
    return _png(figure)


def plot_category_pass(metrics: RobustnessMetrics, k: int) -> bytes:
    """Nominal Pass@k next to Robust Pass_s@k for each category."""
    groups = metrics.categories
    return _grouped_bars(
        groups,
        [
            (f"Nominal Pass@{k}", [_percent(g.pass_at_k[k]) for g in groups], NOMINAL_COLOR),
            (f"Robust Pass@{k}", [_percent(g.robust_pass[k]) for g in groups], ROBUST_COLOR),
        ],
        "%",
        f"Pass@{k}: nominal and worst case over variants",
    )


def plot_category_drop(metrics: RobustnessMetrics, k: int) -> bytes:
    """Robust Drop_s@k and Robust Relative_s@k for each category (lower is more robust)."""
    groups = metrics.categories
    return _grouped_bars(
        groups,
        [
            (f"Robust Drop@{k}", [_percent(g.robust_drop[k]) for g in groups], DROP_COLOR),
            (f"Robust Relative@{k}", [_percent(g.robust_relative[k]) for g in groups], RELATIVE_COLOR),
        ],
        "%",
        f"Robust Drop and Relative @{k} (lower is more robust)",
    )


def plot_heatmap(metrics: RobustnessMetrics, k: int) -> bytes:
    """Transformations (rows, grouped by category) × Pass, RP, RD, RR at k, in percent.

    Pass and RP are shaded blue (higher is better), RD and RR red (higher is worse), so a dark cell
    always means "look here" in its own sense; every cell carries its value.
    """
    from matplotlib import colormaps

    rows = metrics.transformations
    columns = [f"Pass@{k}", f"RP@{k}", f"RD@{k}", f"RR@{k}"]
    values = np.array(
        [[_percent(g.pass_at_k[k]), _percent(g.robust_pass[k]), _percent(g.robust_drop[k]),
          _percent(g.robust_relative[k])] for g in rows],
        dtype=float,
    ).reshape(len(rows), len(columns))  # (transformations, 4)
    shade = np.clip(np.nan_to_num(values, nan=0.0) / 100.0, 0.0, 1.0) * 0.85  # (transformations, 4)
    colors = np.zeros(values.shape + (4,))  # (transformations, 4, RGBA)
    colors[:, :2] = colormaps["Blues"](shade[:, :2])
    colors[:, 2:] = colormaps["Reds"](shade[:, 2:])
    colors[np.isnan(values)] = (0.87, 0.87, 0.87, 1.0)
    figure = _figure(7.0, 1.2 + 0.3 * max(len(rows), 1))
    axes = figure.add_subplot()
    axes.imshow(colors, aspect="auto")
    for (row, column), value in np.ndenumerate(values):
        text = "n/a" if math.isnan(value) else f"{value:.1f}"
        dark = shade[row, column] > 0.5
        axes.text(column, row, text, ha="center", va="center", fontsize=8, color="white" if dark else "black")
    axes.set_xticks(range(len(columns)), columns)
    axes.xaxis.tick_top()
    axes.set_yticks(range(len(rows)), [f"{g.name}  ({category_label(g.category)})" for g in rows], fontsize=8)
    axes.tick_params(length=0)
    for row in range(1, len(rows)):
        if rows[row].category != rows[row - 1].category:
            axes.axhline(row - 0.5, color="black", linewidth=1.2)
    axes.set_title(f"Per transformation, worst case over seeds (k={k}, %)", fontsize=11, pad=10)
    return _png(figure)


def report_plots(metrics: RobustnessMetrics, k: int) -> dict[str, bytes]:
    """File name → PNG bytes for every report figure at `k`."""
    plots = {}
    if metrics.categories:
        plots["categories_pass.png"] = plot_category_pass(metrics, k)
        plots["categories_drop.png"] = plot_category_drop(metrics, k)
    if metrics.transformations:
        plots["transformations_heatmap.png"] = plot_heatmap(metrics, k)
    return plots
