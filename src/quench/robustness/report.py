"""Write a robustness run's report: metrics.json, examples.jsonl, report.md, report.html and PNG figures."""

from __future__ import annotations

import difflib
import json
import logging
from pathlib import Path
from typing import Mapping, Sequence

from quench.errors import QuenchError
from quench.robustness.examples import Example
from quench.robustness.html import render_html
from quench.robustness.metrics import RobustnessMetrics
from quench.robustness.plots import category_label, report_plots
from quench.robustness.tables import group_cells, metric_header, pct

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.json"
EXAMPLES_FILE = "examples.jsonl"
MARKDOWN_FILE = "report.md"
HTML_FILE = "report.html"


def _cell(value: object) -> str:
    text = ", ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


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
        f"Nominal: {example.nominal_detail}. Perturbed: {example.perturbed_detail}.",
        "",
        "```diff", *diff, "```",
        "",
        "Nominal completion:", "", "```python", example.nominal_completion.rstrip(), "```", "",
        "Perturbed completion:", "", "```python", example.perturbed_completion.rstrip(), "```", "",
    ]


def render_markdown(
    metrics: RobustnessMetrics, examples: Sequence[Example], run_info: Mapping[str, object], plot_names: Sequence[str]
) -> str:
    """The report as Markdown: run info, nominal, category and transformation tables, figures, examples."""
    lines = ["# Robustness report", ""]
    lines += _md_table(["Run", ""], [[key, value] for key, value in run_info.items()], 2)
    lines += ["## Nominal", ""]
    lines += _md_table(
        ["Prompt", "Problems"] + [f"Pass@{k}" for k in metrics.ks],
        [[kind, metrics.nominal_problems[kind]] + [pct(p[k]) for k in metrics.ks]
         for kind, p in metrics.nominal_pass.items()],
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
    lines += [
        "Percentages; worst case over the seeds of a transformation, over every transformation × seed of a "
        "category. RR = RR⁻ + RR⁺: samples that went pass → fail / fail → pass under some variant (for k > 1 "
        "the sum can exceed 100). Valid variants passed the meaning check; a problem with none keeps its "
        "nominal result. "
        "Definitions: docs/robustness.md.",
        "",
    ]
    if plot_names:
        lines += [f"## Figures (k={metrics.ks[0]})", ""] + [f"![{name}]({name})" for name in plot_names] + [""]
    lines += ["## Examples: passed nominally, failed perturbed", ""]
    if not examples:
        lines += ["No sample passed nominally and failed under a perturbation.", ""]
    for category in dict.fromkeys(e.category for e in examples):
        lines += [f"### {category_label(category)}", ""]
        for example in examples:
            if example.category == category:
                lines += _example_markdown(example)
    return "\n".join(lines)


def write_report(
    out_dir: Path | str, metrics: RobustnessMetrics, examples: Sequence[Example], run_info: Mapping[str, object]
) -> list[Path]:
    """Write every report file into `out_dir` (created if needed); returns their paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = report_plots(metrics, metrics.ks[0])
    written = []
    for name, png in plots.items():
        written.append(out_dir / name)
        written[-1].write_bytes(png)
    payload = {"run_info": dict(run_info), "metrics": metrics.to_json()}
    contents = {
        METRICS_FILE: json.dumps(payload, indent=2, default=str) + "\n",
        EXAMPLES_FILE: "".join(json.dumps(e.to_json()) + "\n" for e in examples),
        MARKDOWN_FILE: render_markdown(metrics, examples, run_info, list(plots)),
        HTML_FILE: render_html(metrics, examples, run_info, plots),
    }
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
