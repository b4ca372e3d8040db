"""Figures as people and files read them.

People (console, report.md, report.html) read percent with its sign and one decimal: `12.2%`. Files
(summary.json, metrics.json, metrics_plus.json, compare.json) hold fractions with `DIGITS` significant
digits, so a file says 0.17025, not the float noise 0.17024999999999865, and a p-value of 6e-08 keeps
its digits."""

from __future__ import annotations

DIGITS = 6  # a millionth of a rate: far below any interval's width, far above float noise


def rounded(data: object, digits: int = DIGITS) -> object:
    """`data` (JSON-ready dicts, lists, numbers) with every float kept to `digits` significant digits."""
    if isinstance(data, float):
        return float(f"{data:.{digits}g}") + 0.0  # + 0.0: -0.0 becomes 0.0
    if isinstance(data, dict):
        return {key: rounded(value, digits) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [rounded(value, digits) for value in data]
    return data


def percent(share: float | None) -> str:
    """A rate as a person reads it (console and reports): percent with its sign, one decimal; `n/a`
    when undefined."""
    return "n/a" if share is None else f"{100.0 * share:.1f}%"


def percent_interval(point: float | None, low: float | None, high: float | None) -> str:
    """`12.2% [7.3%, 17.7%]`: a point and its interval in percent; the point alone without bounds."""
    if low is None or high is None:
        return percent(point)
    return f"{percent(point)} [{percent(low)}, {percent(high)}]"
