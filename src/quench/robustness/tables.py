"""Table cells shared by the Markdown and HTML reports."""

from __future__ import annotations

from quench.robustness.metrics import GroupMetrics


def pct(value: float | None) -> str:
    """A metric in percent with two decimals, as ReCode's tables; `n/a` when undefined."""
    return "n/a" if value is None else f"{100.0 * value:.2f}"


def metric_header(k: int, seeds_mark: str = "_s") -> list[str]:
    return [f"Pass@{k}", f"RP{seeds_mark}@{k}", f"RD{seeds_mark}@{k}", f"RR{seeds_mark}@{k}", "RR⁻ / RR⁺",
            "Valid variants", "Changed"]


def group_cells(group: GroupMetrics, k: int) -> list[str]:
    """The cells under `metric_header(k)` for one category or transformation."""
    return [
        pct(group.pass_at_k[k]), pct(group.robust_pass[k]), pct(group.robust_drop[k]),
        pct(group.robust_relative[k]), f"{pct(group.relative_worse[k])} / {pct(group.relative_better[k])}",
        f"{group.variants_valid}/{group.variants_total}", str(group.variants_changed),
    ]
