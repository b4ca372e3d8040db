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
from quench.stats.intervals import Interval

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


def captions(k: int) -> dict[str, str]:
    """File name → the caption the reports print under each figure."""
    return {
        "categories_pass.png": (
            f"Figure 1. Nominal Pass@{k} and Robust Pass@{k} per category: the share of problems solved on "
            "the nominal prompt and in every variant of the category (worst case over transformations × "
            "seeds). Error bars: 95% bootstrap intervals over problems."),
        "categories_drop.png": (
            f"Figure 2. Robust Drop@{k} (relative loss from nominal to worst case) and Robust Relative@{k} "
            "(share of problems whose result changes under some variant) per category; lower is more robust. "
            "Error bars: 95% bootstrap intervals; RD is left out where fewer than 10 problems pass nominally."),
        "transformations_heatmap.png": (
            f"Figure 3. Every transformation (rows, grouped by category) × Pass@{k}, RP@{k}, RD@{k} and RR@{k} "
            "in percent, worst case over its seeds, with the 95% interval under each value. Blue: higher is "
            "better; red: higher is worse."),
    }


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


def _series(groups: tuple[GroupMetrics, ...], metric: str, k: int) -> tuple[list[float], list[Interval | None]]:
    values = [getattr(g, metric)[k] for g in groups]
    intervals = [g.interval(metric, k) for g in groups]
    shown = [math.nan if (i is not None and i.note) else _percent(v) for v, i in zip(values, intervals)]
    return shown, intervals


def _error_bars(values: list[float], intervals: list[Interval | None]) -> np.ndarray:
    """(2, bars) distances below and above each bar to its interval's ends; 0 where there is none."""
    errors = np.zeros((2, len(values)))
    for i, (value, interval) in enumerate(zip(values, intervals)):
        if interval is not None and interval.low is not None and interval.high is not None and not math.isnan(value):
            errors[:, i] = (max(value - 100.0 * interval.low, 0.0), max(100.0 * interval.high - value, 0.0))
    return errors


def _grouped_bars(
    groups: tuple[GroupMetrics, ...], series: list[tuple[str, str, str]], k: int, ylabel: str, title: str
) -> bytes:
    """Bars per category with 95% error bars, one colour per (label, metric, colour) series; bars without
    a value are left out and labelled (n/a, or "too few" where RD rests on too few nominal passes)."""
    figure = _figure(7.5, 3.8)
    axes = figure.add_subplot()
    x = np.arange(len(groups))
    width = 0.8 / len(series)
    tops = []
    for position, (label, metric, color) in enumerate(series):
        values, intervals = _series(groups, metric, k)
        errors = _error_bars(values, intervals)
        positions = x - 0.4 + width * (position + 0.5)
        heights = [0.0 if math.isnan(v) else v for v in values]
        bars = axes.bar(positions, heights, width, label=label, color=color, yerr=errors,
                        error_kw={"elinewidth": 1.0, "capsize": 3, "ecolor": "#333333"})
        texts = [("too few" if iv and iv.note else "n/a") if math.isnan(v) else f"{v:.1f}"
                 for v, iv in zip(values, intervals)]
        axes.bar_label(bars, labels=texts, padding=2, fontsize=8)
        tops += [h + e for h, e in zip(heights, errors[1])] + [h - e for h, e in zip(heights, errors[0])]
    axes.set_xticks(x, [category_label(g.category) for g in groups])
    axes.set_ylabel(ylabel)
    axes.set_title(title, fontsize=11)
    # RD can be negative (a perturbation fixed problems); error bars can reach past the bars.
    axes.set_ylim(min([0.0] + tops) * 1.15, max([100.0] + tops) * 1.1)
    axes.axhline(0, color="#444444", linewidth=0.8)
    axes.legend(frameon=False, fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncols=len(series))
    axes.spines[["top", "right"]].set_visible(False)
    return _png(figure)


def plot_category_pass(metrics: RobustnessMetrics, k: int) -> bytes:
    """Nominal Pass@k next to Robust Pass_s@k for each category."""
    groups = metrics.categories
    return _grouped_bars(
        groups,
        [(f"Nominal Pass@{k}", "pass_at_k", NOMINAL_COLOR), (f"Robust Pass@{k}", "robust_pass", ROBUST_COLOR)],
        k,
        "%",
        f"Pass@{k}: nominal and worst case over variants",
    )


def plot_category_drop(metrics: RobustnessMetrics, k: int) -> bytes:
    """Robust Drop_s@k and Robust Relative_s@k for each category (lower is more robust)."""
    groups = metrics.categories
    return _grouped_bars(
        groups,
        [(f"Robust Drop@{k}", "robust_drop", DROP_COLOR), (f"Robust Relative@{k}", "robust_relative", RELATIVE_COLOR)],
        k,
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
    names = ("pass_at_k", "robust_pass", "robust_drop", "robust_relative")
    values = np.array([_series(rows, name, k)[0] for name in names], dtype=float).T.reshape(
        len(rows), len(columns))  # (transformations, 4)
    shade = np.clip(np.nan_to_num(values, nan=0.0) / 100.0, 0.0, 1.0) * 0.85  # (transformations, 4)
    colors = np.zeros(values.shape + (4,))  # (transformations, 4, RGBA)
    colors[:, :2] = colormaps["Blues"](shade[:, :2])
    colors[:, 2:] = colormaps["Reds"](shade[:, 2:])
    colors[np.isnan(values)] = (0.87, 0.87, 0.87, 1.0)
    figure = _figure(7.0, 1.2 + 0.42 * max(len(rows), 1))
    axes = figure.add_subplot()
    axes.imshow(colors, aspect="auto")
    for (row, column), value in np.ndenumerate(values):
        interval = rows[row].interval(names[column], k)
        text = ("too few" if interval and interval.note else "n/a") if math.isnan(value) else f"{value:.1f}"
        if interval is not None and interval.low is not None and not math.isnan(value):
            text += f"\n[{100 * interval.low:.0f}, {100 * interval.high:.0f}]"
        dark = shade[row, column] > 0.5
        axes.text(column, row, text, ha="center", va="center", fontsize=7, linespacing=1.1, color="white" if dark else "black")
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


VERDICT_COLOR = {"B better": ROBUST_COLOR, "B worse": DROP_COLOR}


def plot_differences(labels: list[str], differences: list[Interval], verdicts: list[str]) -> bytes:
    """One row per comparison row: B − A in percentage points with its interval, coloured by verdict
    (blue: B better, red: B worse, grey: no detectable difference); rows without an interval are marked."""
    figure = _figure(7.0, 1.0 + 0.32 * max(len(labels), 1))
    axes = figure.add_subplot()
    y = np.arange(len(labels))[::-1]
    for row, interval, verdict in zip(y, differences, verdicts):
        if interval.point is None or interval.low is None or interval.high is None:
            axes.text(0, row, interval.note or "n/a", ha="center", va="center", fontsize=8, color="#666666")
            continue
        point, low, high = 100.0 * interval.point, 100.0 * interval.low, 100.0 * interval.high
        color = VERDICT_COLOR.get(verdict, "#666666")
        axes.errorbar(point, row, xerr=[[point - low], [high - point]], fmt="o", color=color, capsize=3, markersize=4)
    axes.axvline(0, color="#999999", linewidth=0.8, linestyle="--")
    axes.set_yticks(y, labels, fontsize=8)
    axes.set_xlabel("B − A (percentage points)")
    axes.spines[["top", "right"]].set_visible(False)
    return _png(figure)
