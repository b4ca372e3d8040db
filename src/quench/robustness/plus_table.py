"""MBPP+ robustness: the metrics on MBPP's base inputs and on base + extra inputs, side by side."""

from __future__ import annotations

from quench.robustness.metrics import GroupMetrics, RobustnessMetrics

COLUMNS = ("robust_pass", "robust_drop", "robust_relative")
HEADERS = ("RP", "RD", "RR")


def _cell(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}"


def side_by_side(base: RobustnessMetrics, plus: RobustnessMetrics, k: int | None = None) -> list[str]:
    """A Markdown table: nominal Pass@k, then RP/RD/RR per category and transformation, base | plus (in %)."""
    k = k if k is not None else base.ks[0]
    head = " | ".join(f"{h}@{k} base | {h}@{k} plus" for h in HEADERS)
    lines = [f"| group | Pass@{k} base | Pass@{k} plus | {head} |", "|---" * (3 + 2 * len(COLUMNS)) + "|"]
    plus_rows = {(g.category, g.name): g for g in (*plus.categories, *plus.transformations)}
    for group in (*base.categories, *base.transformations):
        other: GroupMetrics = plus_rows[(group.category, group.name)]
        cells = [_cell(group.pass_at_k.get(k)), _cell(other.pass_at_k.get(k))]
        for column in COLUMNS:
            cells += [_cell(getattr(group, column).get(k)), _cell(getattr(other, column).get(k))]
        lines.append(f"| {group.name} | " + " | ".join(cells) + " |")
    return lines
