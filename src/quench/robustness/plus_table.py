"""MBPP+ robustness: the metrics on MBPP's base inputs and on base + extra inputs, side by side.

One table for every audience that shows it (the console, plus.md, report.md, report.html): each cell
in percent with its 95% interval, the same cells the report's own tables use."""

from __future__ import annotations

from quench.robustness.metrics import GroupMetrics, RobustnessMetrics
from quench.robustness.tables import with_interval

COLUMNS = ("pass_at_k", "robust_pass", "robust_drop", "robust_relative")
HEADERS = ("Pass", "RP", "RD", "RR")
TITLE = "MBPP+: base inputs and base + extra inputs"


def plus_header(k: int) -> list[str]:
    return ["group"] + [f"{h}@{k} {inputs}" for h in HEADERS for inputs in ("base", "plus")]


def _cell(group: GroupMetrics, column: str, k: int) -> str:
    return with_interval(getattr(group, column).get(k), group.interval(column, k))


def plus_rows(base: RobustnessMetrics, plus: RobustnessMetrics, k: int) -> list[list[str]]:
    """One row per category and transformation: each metric on the base inputs, then on base + extra."""
    plus_groups = {(g.category, g.name): g for g in (*plus.categories, *plus.transformations)}
    rows = []
    for group in (*base.categories, *base.transformations):
        other = plus_groups[(group.category, group.name)]
        rows.append([group.name] + [_cell(g, column, k) for column in COLUMNS for g in (group, other)])
    return rows


def side_by_side(base: RobustnessMetrics, plus: RobustnessMetrics, k: int | None = None) -> list[str]:
    """A Markdown table: Pass/RP/RD/RR per category and transformation, base | plus, with intervals."""
    k = k if k is not None else base.ks[0]
    header = plus_header(k)
    lines = ["| " + " | ".join(header) + " |", "|---" + "|---:" * (len(header) - 1) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in plus_rows(base, plus, k)]
