"""Compare two runs over the same problems: B − A per metric with a paired bootstrap interval and McNemar's test.

Both runs are resampled with the same draws of problems, so a problem's result in A and in B stay
together (the difference is a mean of per-problem differences). For greedy pass/fail (n = 1) the
exact McNemar test (McNemar, 1947; the binomial test on the discordant problems) is given too. A row
says "B better" or "B worse" only when the 95% interval excludes 0 and, where McNemar applies, p < 0.05.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from quench.errors import QuenchError
from quench.perturbations.base import CATEGORIES
from quench.robustness.groups import FULL, PARTIAL
from quench.robustness.metrics import (
    ProblemCounts, RobustnessRun, outcomes_from_results, per_problem_values, problem_counts,
)
from quench.robustness.report import METRICS_FILE, OUTCOMES_FILE, load_outcomes
from quench.runs.evaluate import read_results
from quench.stats.figures import rounded
from quench.stats.intervals import BootstrapConfig, Interval, paired_difference, paired_drop_difference

RUN_RESULTS = "results.jsonl"  # `quench run`: one record per (task, sample) with `passed`
RUN_SUMMARY = "summary.json"
ALPHA = 0.05
# metric → (column of per_problem_values, higher is better)
METRICS = {"Pass": (0, True), "RP": (1, True), "RD": (None, False), "RR": (2, False)}


@dataclass(frozen=True)
class LoadedRun:
    """What a comparison needs from one run directory."""

    path: Path
    kind: str  # "run" or "robustness"
    ks: tuple[int, ...]
    run: RobustnessRun  # a `quench run` directory is a robustness run without variants (nominal_full only)


@dataclass(frozen=True)
class McNemar:
    a_only: int  # problems that pass in A and fail in B
    b_only: int  # problems that fail in A and pass in B
    p_value: float  # exact two-sided


@dataclass(frozen=True)
class CompareRow:
    group: str  # "nominal (full prompt)", a category, or "all problems" for a `run` directory
    metric: str  # e.g. "RP@1"
    a: float | None
    b: float | None
    difference: Interval  # B − A
    mcnemar: McNemar | None
    verdict: str

    def to_json(self) -> dict:
        mcnemar = None if self.mcnemar is None else vars(self.mcnemar)
        return {"group": self.group, "metric": self.metric, "a": self.a, "b": self.b,
                "difference": self.difference.to_json(), "mcnemar": mcnemar, "verdict": self.verdict}


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise QuenchError(f"{path}: cannot read it ({error})") from error


def load_run(path: Path) -> LoadedRun:
    """A `quench robustness` directory (metrics.json + outcomes.json) or a `quench run` one (results.jsonl)."""
    if not path.is_dir():
        raise QuenchError(f"{path}: no such run directory")
    if (path / METRICS_FILE).is_file():
        if not (path / OUTCOMES_FILE).is_file():
            raise QuenchError(f"{path}: has no {OUTCOMES_FILE}; rerun its `quench robustness` command with the "
                              "same --out (nothing is regenerated) to write it")
        ks = tuple(_read_json(path / METRICS_FILE)["metrics"]["ks"])
        return LoadedRun(path, "robustness", ks, load_outcomes(path / OUTCOMES_FILE))
    if (path / RUN_RESULTS).is_file() and (path / RUN_SUMMARY).is_file():
        ks = tuple(sorted(int(key.split("@")[1]) for key in _read_json(path / RUN_SUMMARY)["pass_at_k"]))
        records = read_results(path / RUN_RESULTS)
        return LoadedRun(path, "run", ks, RobustnessRun(outcomes_from_results(records), ()))
    raise QuenchError(f"{path}: not a run directory (no {METRICS_FILE} of `quench robustness`, "
                      f"no {RUN_RESULTS} and {RUN_SUMMARY} of `quench run`)")


def _differ(what: str, only_a: set, only_b: set) -> str:
    def shown(items: set) -> str:
        listed = sorted(map(str, items))
        return ", ".join(listed[:3]) + (" …" if len(listed) > 3 else "")

    parts = [f"{len(s)} only in {name} ({shown(s)})" for name, s in (("A", only_a), ("B", only_b)) if s]
    return f"the runs are over different {what}: {'; '.join(parts)}"


def check_comparable(a: LoadedRun, b: LoadedRun) -> None:
    """Refuse runs of different kinds, problems, variants or k."""
    if a.kind != b.kind:
        raise QuenchError(f"{a.path} is a `quench {a.kind}` directory and {b.path} a `quench {b.kind}` one")
    for name, first, second in (("full-prompt problems", a.run.nominal_full, b.run.nominal_full),
                                ("partial-prompt problems", a.run.nominal_partial, b.run.nominal_partial)):
        if first.keys() != second.keys():
            raise QuenchError(_differ(name, first.keys() - second.keys(), second.keys() - first.keys()))
    variants_a = {(v.transformation, v.seed): frozenset(v.outcomes) for v in a.run.variants}
    variants_b = {(v.transformation, v.seed): frozenset(v.outcomes) for v in b.run.variants}
    if variants_a.keys() != variants_b.keys():
        keys_a, keys_b = set(variants_a), set(variants_b)
        raise QuenchError(_differ("variants (transformation, seed)", keys_a - keys_b, keys_b - keys_a))
    for key, tasks in variants_a.items():
        if tasks != variants_b[key]:
            raise QuenchError(_differ(f"variants: {key[0]} seed {key[1]} is valid for different problems",
                                      tasks - variants_b[key], variants_b[key] - tasks))
    if a.ks != b.ks:
        raise QuenchError(f"the runs report different k: {', '.join(map(str, a.ks))} in A, "
                          f"{', '.join(map(str, b.ks))} in B")


def mcnemar(a: np.ndarray, b: np.ndarray) -> McNemar:
    """Exact two-sided McNemar test on paired 0/1 outcomes: binomial(discordant, 1/2)."""
    a_only, b_only = int(np.sum((a == 1) & (b == 0))), int(np.sum((a == 0) & (b == 1)))
    discordant = a_only + b_only
    tail = sum(math.comb(discordant, i) for i in range(min(a_only, b_only) + 1)) / 2.0 ** discordant
    return McNemar(a_only, b_only, min(1.0, 2.0 * tail))


def verdict(difference: Interval, higher_is_better: bool, test: McNemar | None) -> str:
    if difference.note:
        return difference.note
    if difference.low is None or difference.high is None:
        return "no interval"
    excludes_zero = difference.low > 0 or difference.high < 0
    if not excludes_zero or (test is not None and test.p_value >= ALPHA):
        return "no detectable difference"
    return "B better" if (difference.low > 0) == higher_is_better else "B worse"


def _counts(run: RobustnessRun, category: str | None, tasks: Sequence[str]) -> list[ProblemCounts]:
    """Per-problem counts in `tasks` order: the nominal baseline alone, or worst/best case over a category."""
    baseline = run.nominal_full if category is None else run.baseline(category)
    variants = [v for v in run.variants if v.category == category]
    return [problem_counts(baseline[t], [v.outcomes[t] for v in variants if t in v.outcomes] if category else [])
            for t in tasks]


def _rows_of_group(group: str, a: list[ProblemCounts], b: list[ProblemCounts], k: int, metrics: Sequence[str],
                   bootstrap: BootstrapConfig) -> list[CompareRow]:
    values_a, values_b = per_problem_values(a, k), per_problem_values(b, k)  # (problems, 5) each
    greedy = all(c.n == 1 for c in a + b)
    rows = []
    for metric in metrics:
        column, higher_is_better = METRICS[metric]
        if column is None:  # RD: a ratio of means, bootstrapped as one
            passing = min(sum(c.nominal > 0 for c in a), sum(c.nominal > 0 for c in b))
            difference = paired_drop_difference((values_a[:, 0], values_a[:, 1]), (values_b[:, 0], values_b[:, 1]),
                                                passing, bootstrap)
            point_a, point_b, test = _drop(values_a), _drop(values_b), None
        else:
            difference = paired_difference(values_a[:, column], values_b[:, column], bootstrap)
            point_a, point_b = float(values_a[:, column].mean()), float(values_b[:, column].mean())
            test = mcnemar(values_a[:, column], values_b[:, column]) if greedy else None
        rows.append(CompareRow(group, f"{metric}@{k}", point_a, point_b, difference, test,
                               verdict(difference, higher_is_better, test)))
    return rows


def _drop(values: np.ndarray) -> float | None:
    nominal, robust = values[:, 0].mean(), values[:, 1].mean()
    if nominal == 0:
        return 0.0 if robust == 0 else None
    return float((nominal - robust) / nominal)


def compare_runs(a: LoadedRun, b: LoadedRun, bootstrap: BootstrapConfig = BootstrapConfig()) -> list[CompareRow]:
    """Every row of the comparison, after `check_comparable`."""
    check_comparable(a, b)
    rows: list[CompareRow] = []
    if a.kind == "run":
        tasks = sorted(a.run.nominal_full)
        for k in a.ks:
            rows += _rows_of_group("all problems", _counts(a.run, None, tasks), _counts(b.run, None, tasks), k,
                                   ["Pass"], bootstrap)
        return rows
    order = {c: i for i, c in enumerate(CATEGORIES)}
    categories = sorted({v.category for v in a.run.variants}, key=lambda c: (order.get(c, len(order)), c))
    for k in a.ks:
        for kind, baseline in ((FULL, a.run.nominal_full), (PARTIAL, a.run.nominal_partial)):
            if baseline:
                tasks = sorted(baseline)
                swapped = [RobustnessRun(r.nominal_partial if kind == PARTIAL else r.nominal_full, ())
                           for r in (a.run, b.run)]
                rows += _rows_of_group(f"nominal ({kind} prompt)", _counts(swapped[0], None, tasks),
                                       _counts(swapped[1], None, tasks), k, ["Pass"], bootstrap)
        for category in categories:
            tasks = sorted(a.run.baseline(category))
            rows += _rows_of_group(category, _counts(a.run, category, tasks), _counts(b.run, category, tasks), k,
                                   ["RP", "RD", "RR"], bootstrap)
    return rows


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100.0 * value:.1f}"


def difference_cell(interval: Interval) -> str:
    """`+3.05 [-1.2, 7.3]` percentage points, or the interval's note."""
    if interval.note:
        return interval.note
    if interval.point is None:
        return "n/a"
    text = f"{100.0 * interval.point:+.1f}"
    if interval.low is None or interval.high is None:
        return text
    return f"{text} [{100.0 * interval.low:+.1f}, {100.0 * interval.high:+.1f}]"


HEADER = ["Group", "Metric", "A (%)", "B (%)", "B − A (points, 95% interval)", "McNemar p (A only / B only)",
          "Verdict"]


def table_cells(row: CompareRow) -> list[str]:
    test = "—" if row.mcnemar is None else (
        f"{row.mcnemar.p_value:.3g} ({row.mcnemar.a_only} / {row.mcnemar.b_only})")
    return [row.group, row.metric, _pct(row.a), _pct(row.b), difference_cell(row.difference), test, row.verdict]


def render_markdown(rows: Sequence[CompareRow], a: Path, b: Path, bootstrap: BootstrapConfig, plot: str | None) -> str:
    lines = ["# Comparison", "", f"A: `{a}`  ", f"B: `{b}`", "",
             "| " + " | ".join(HEADER) + " |", "|" + "---|" * 2 + "---:|" * 4 + "---|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in table_cells(row)) + " |" for row in rows]
    lines += ["", method_text(bootstrap), ""]
    if plot:
        lines += [f"![B − A]({plot})", "", f"*{PLOT_CAPTION}*", ""]
    return "\n".join(lines)


def render_html(rows: Sequence[CompareRow], a: Path, b: Path, bootstrap: BootstrapConfig, png: bytes | None) -> str:
    import base64
    from html import escape

    from quench.robustness.html import CSS

    head = "".join(f"<th>{escape(h)}</th>" for h in HEADER)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in table_cells(row)) + "</tr>" for row in rows)
    figure = "" if png is None else (
        f'<figure><img alt="B − A per row" src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">'
        f"<figcaption>{escape(PLOT_CAPTION)}</figcaption></figure>")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>Comparison</title>'
            f"<style>{CSS}</style></head>\n<body><h1>Comparison</h1>"
            f'<p class="subtitle">A: {escape(str(a))}<br>B: {escape(str(b))}</p>'
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
            f'<p class="note">{escape(method_text(bootstrap))}</p>{figure}</body></html>\n')


PLOT_CAPTION = ("B − A for each row in percentage points with its 95% paired bootstrap interval; right of 0: B "
                "higher (for RD and RR lower is more robust). Blue: B better, red: B worse, grey: no detectable "
                "difference.")


def method_text(bootstrap: BootstrapConfig) -> str:
    return (f"B − A: paired bootstrap over problems ({bootstrap.resamples:,} resamples, seed {bootstrap.seed}, "
            f"{100 * bootstrap.confidence:g}% percentile interval): both runs are resampled with the same draws. "
            "McNemar: exact two-sided test on the problems where greedy pass/fail differ (n = 1 only). "
            f"A verdict needs the interval to exclude 0 and, where McNemar applies, p < {ALPHA}. RD needs "
            f"{bootstrap.min_nominal_passes} nominally passing problems in both runs.")


def write_comparison(out: Path, rows: Sequence[CompareRow], a: Path, b: Path, bootstrap: BootstrapConfig) -> list[Path]:
    """compare.md, compare.html, compare.json and compare.png in `out` (created if needed)."""
    from quench.robustness.plots import plot_differences

    out.mkdir(parents=True, exist_ok=True)
    png = plot_differences([f"{r.group}: {r.metric}" for r in rows], [r.difference for r in rows],
                           [r.verdict for r in rows]) if rows else None
    files = {
        "compare.md": render_markdown(rows, a, b, bootstrap, "compare.png" if png else None),
        "compare.html": render_html(rows, a, b, bootstrap, png),
        "compare.json": json.dumps(rounded(comparison_json(rows, a, b, bootstrap)), indent=2) + "\n",
    }
    written = []
    for name, text in files.items():
        written.append(out / name)
        written[-1].write_text(text, encoding="utf-8")
    if png:
        written.append(out / "compare.png")
        written[-1].write_bytes(png)
    return written


def comparison_json(rows: Sequence[CompareRow], a: Path, b: Path, bootstrap: BootstrapConfig) -> dict:
    return {"a": str(a), "b": str(b), "bootstrap": vars(bootstrap), "rows": [row.to_json() for row in rows]}
