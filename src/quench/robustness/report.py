"""Write a robustness run's report: metrics.json, examples.jsonl, report.md, report.html and PNG figures."""

from __future__ import annotations

import difflib
import json
import logging
from pathlib import Path
from typing import Mapping, Sequence

from quench.errors import QuenchError
from quench.robustness.examples import Example, split_detail
from quench.robustness.groups import FULL, PARTIAL
from quench.robustness.html import render_html
from quench.robustness.metrics import MIN_CHANGED_PROBLEMS, RobustnessMetrics, RobustnessRun, VariantOutcomes
from quench.robustness.plots import captions, category_label, report_plots
from quench.robustness.plus_table import TITLE, plus_header, plus_rows
from quench.stats.figures import rounded
from quench.robustness.tables import changed_problems, group_cells, metric_header, method_note, run_rows, with_interval

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.json"
EXAMPLES_FILE = "examples.jsonl"
MARKDOWN_FILE = "report.md"
HTML_FILE = "report.html"
OUTCOMES_FILE = "outcomes.json"  # per-problem pass/fail of every baseline and variant: what `quench compare` reads



def _cell(value: object) -> str:
    text = ", ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
    return text.replace("|", "\\|").replace("`", "\\`").replace("\n", " ")


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]], numeric_from: int) -> list[str]:
    align = ["---" if i < numeric_from else "---:" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines + [""]


def _example_markdown(example: Example) -> list[str]:
    diff = difflib.unified_diff(
        example.nominal_prompt.splitlines(), example.perturbed_prompt.splitlines(),
        "nominal prompt", "perturbed prompt", lineterm="",
    )
    return [
        f"#### {example.task_id} — {example.transformation}, seed {example.seed}, sample {example.sample}",
        "",
        *_outcome_lines(example),
        "```diff", *diff, "```",
        "",
        "Nominal completion:", "", "```python", example.nominal_completion.rstrip(), "```", "",
        "Perturbed completion:", "", "```python", example.perturbed_completion.rstrip(), "```", "",
    ]


def _outcome_lines(example: Example) -> list[str]:
    """`Nominal: passed. Perturbed: failed.`, then each side's detail on a line of its own."""
    (nominal, nominal_detail), (perturbed, perturbed_detail) = (split_detail(example.nominal_detail),
                                                                split_detail(example.perturbed_detail))
    lines = [f"Nominal: {nominal}. Perturbed: {perturbed}.", ""]
    for side, detail in (("Nominal", nominal_detail), ("Perturbed", perturbed_detail)):
        if detail:
            lines += [f"{side} detail: `{_cell(detail[:300])}`", ""]
    return lines


def render_markdown(
    metrics: RobustnessMetrics, examples: Sequence[Example], run_info: Mapping[str, object], plot_names: Sequence[str],
    metrics_plus: RobustnessMetrics | None = None,
) -> str:
    """The report as Markdown: run info, nominal, category and transformation tables, MBPP+'s base and
    extra inputs side by side (with `metrics_plus`), figures, examples."""
    lines = ["# Robustness report", "", "## Run", ""]
    lines += _md_table(["Setting", "Value"], [list(row) for row in run_rows(run_info)], 2)
    lines += ["## Nominal", ""]
    lines += _md_table(
        ["Prompt", "Problems"] + [f"Pass@{k}" for k in metrics.ks],
        [[kind, metrics.nominal_problems[kind]] + nominal_cells(metrics, kind) for kind in metrics.nominal_pass],
        1,
    )
    for k in metrics.ks:
        lines += [f"## Categories (k={k})", ""]
        lines += _md_table(
            ["Category", "Baseline", "Transf."] + metric_header(k),
            [[category_label(g.category), g.baseline, len(g.transformations)] + group_cells(g, k)
             for g in metrics.categories],
            2,
        )
    for k in metrics.ks:
        lines += [f"## Transformations (k={k})", ""]
        lines += _md_table(
            ["Transformation", "Category", "Seeds"] + metric_header(k),
            [[g.name, category_label(g.category), len(g.seeds)] + group_cells(g, k) for g in metrics.transformations],
            2,
        )
    if metrics_plus is not None:
        for k in metrics.ks:
            lines += [f"## {TITLE} (k={k})", ""]
            lines += _md_table(plus_header(k), plus_rows(metrics, metrics_plus, k), 1)
    lines += [method_note(metrics.bootstrap), ""]
    if plot_names:
        caption = captions(metrics.ks[0])
        lines += [f"## Figures (k={metrics.ks[0]})", ""]
        for name in plot_names:
            text = caption.get(name, name)
            lines += [f"![{text.split('.')[0]}]({name})", "", f"*{text}*", ""]
    lines += ["## Examples: passed nominally, failed perturbed", ""]
    if not examples:
        lines += ["No sample passed nominally and failed under a perturbation.", ""]
    for category in dict.fromkeys(e.category for e in examples):
        lines += [f"### {category_label(category)}", ""]
        for example in examples:
            if example.category == category:
                lines += _example_markdown(example)
    return "\n".join(lines)


def nominal_cells(metrics: RobustnessMetrics, kind: str) -> list[str]:
    """Pass@k of one baseline ("full"/"partial") at each k, with its interval."""
    intervals = metrics.nominal_intervals.get(kind, {})
    return [with_interval(metrics.nominal_pass[kind][k], intervals.get(k)) for k in metrics.ks]


def console_summary(metrics: RobustnessMetrics, stats: Mapping[str, object]) -> list[str]:
    """The lines `quench robustness` prints: the report's first-k numbers, in the same percent units."""
    k = metrics.ks[0]
    kinds = {FULL: "full prompt", PARTIAL: "partial prompt"}
    nominal = ", ".join(f"{kinds.get(kind, kind)} {nominal_cells(metrics, kind)[0]}" for kind in metrics.nominal_pass)
    lines = [f"nominal Pass@{k} (95% interval): {nominal}",
             f"{'category':<15}{'RP@' + str(k):<24}{'RD@' + str(k):<24}{'RR@' + str(k):<24}problems changed"]
    for group in metrics.categories:
        cells = [with_interval(getattr(group, name)[k], group.interval(name, k))
                 for name in ("robust_pass", "robust_drop", "robust_relative")]
        lines.append(f"{group.name:<15}{cells[0]:<24}{cells[1]:<24}{cells[2]:<24}{changed_problems(group)}")
    few = [g for g in metrics.transformations if g.few_changed]
    if few or any(g.few_changed for g in metrics.categories):
        lines.append(f"(few): fewer than {MIN_CHANGED_PROBLEMS} problems changed, the figures describe those alone"
                     + ("; transformations: " + ", ".join(f"{g.name} {changed_problems(g)}".removesuffix(" (few)")
                                                          for g in few) if few else ""))
    lines.append(f"{stats.get('distinct_prompts', '?')} distinct prompts generated, "
                 f"{stats.get('distinct_programs', '?')} distinct programs run, {stats.get('seconds', '?')} s")
    return lines


def run_to_json(run: RobustnessRun) -> dict:
    return {
        "nominal_full": {t: list(r) for t, r in run.nominal_full.items()},
        "nominal_partial": {t: list(r) for t, r in run.nominal_partial.items()},
        "variants": [{"transformation": v.transformation, "category": v.category, "seed": v.seed,
                      "outcomes": {t: list(r) for t, r in v.outcomes.items()}, "unchanged": sorted(v.unchanged)}
                     for v in run.variants],
    }


def load_outcomes(path: Path | str) -> RobustnessRun:
    """Read the `outcomes.json` that `write_report` writes beside the metrics."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        variants = tuple(
            VariantOutcomes(v["transformation"], v["category"], int(v["seed"]),
                            {t: tuple(map(bool, r)) for t, r in v["outcomes"].items()}, frozenset(v["unchanged"]))
            for v in data["variants"])
        return RobustnessRun({t: tuple(map(bool, r)) for t, r in data["nominal_full"].items()}, variants,
                             {t: tuple(map(bool, r)) for t, r in data["nominal_partial"].items()})
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise QuenchError(f"{path}: not a robustness outcomes file ({error})") from error


def write_report(
    out_dir: Path | str, metrics: RobustnessMetrics, examples: Sequence[Example], run_info: Mapping[str, object],
    run: RobustnessRun | None = None, metrics_plus: RobustnessMetrics | None = None,
) -> list[Path]:
    """Write every report file into `out_dir` (created if needed), and the run's outcomes when given;
    `metrics_plus` (MBPP+: the metrics on base + extra inputs) adds its table beside the base one."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = report_plots(metrics, metrics.ks[0])
    written = []
    for name, png in plots.items():
        written.append(out_dir / name)
        written[-1].write_bytes(png)
    payload = {"run_info": dict(run_info), "metrics": metrics.to_json()}
    contents = {
        METRICS_FILE: json.dumps(rounded(payload), indent=2, default=str) + "\n",
        EXAMPLES_FILE: "".join(json.dumps(e.to_json()) + "\n" for e in examples),
        MARKDOWN_FILE: render_markdown(metrics, examples, run_info, list(plots), metrics_plus),
        HTML_FILE: render_html(metrics, examples, run_info, plots, metrics_plus),
    }
    if run is not None:
        contents[OUTCOMES_FILE] = json.dumps(run_to_json(run)) + "\n"
    for name, text in contents.items():
        written.append(out_dir / name)
        written[-1].write_text(text, encoding="utf-8")
    log.info("wrote robustness report to %s", out_dir / HTML_FILE)
    return written


def load_metrics(path: Path | str) -> tuple[RobustnessMetrics, dict[str, object]]:
    """Read a `metrics.json` written by `write_report`: the metrics and the run info."""
    try:
        payload = json.loads(Path(path).read_text(encoding="utf-8"))
        return RobustnessMetrics.from_json(payload["metrics"]), payload["run_info"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise QuenchError(f"{path}: not a robustness metrics file ({error})") from error


def load_examples(path: Path | str) -> list[Example]:
    """Read an `examples.jsonl` written by `write_report`."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [Example.from_json(json.loads(line)) for line in lines if line.strip()]
