"""A self-contained HTML report: inline CSS, PNG figures as base64 data URIs, no script, no external URL."""

from __future__ import annotations

import base64
import re
from difflib import SequenceMatcher
from html import escape
from typing import Mapping, Sequence

from quench.robustness.examples import Example, split_detail
from quench.robustness.metrics import RobustnessMetrics
from quench.robustness.plots import captions, category_label
from quench.robustness.plus_table import TITLE, plus_header, plus_rows
from quench.robustness.tables import group_cells, metric_header, method_note, run_rows, with_interval

# Single whitespace characters are tokens of their own, so an added blank line or a tab shows exactly.
_TOKEN = re.compile(r"\w+|[^\w\s]|\s")
_WITH_INTERVAL = re.compile(r"(\S+%) (\[[^\]]*\])")  # `25.0% [17.0%, 34.0%]`

CSS = """
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d2430;
       max-width: 1240px; margin: 0 auto; padding: 24px; background: #fff; }
h1 { font-size: 26px; margin: 0 0 4px; } h2 { font-size: 20px; margin-top: 36px;
     border-bottom: 2px solid #e3e8ef; padding-bottom: 4px; } h3 { font-size: 17px; margin-top: 26px; }
.subtitle { color: #5b6576; margin: 0 0 20px; }
.scroll { overflow-x: auto; margin: 8px 0 16px; max-width: 100%; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border: 1px solid #d8dee8; padding: 4px 7px; text-align: left; vertical-align: top; }
th { background: #eef2f7; } tbody tr:nth-child(even) { background: #f8fafc; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
dl.info { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 0; }
dl.info dt { font-weight: 600; color: #3c4657; } dl.info dd { margin: 0; word-break: break-word; }
figure { margin: 12px 0 20px; } figure img { max-width: 100%; height: auto; border: 1px solid #e3e8ef; }
figcaption { color: #5b6576; font-size: 13px; }
.example { border: 1px solid #d8dee8; border-radius: 6px; padding: 10px 14px; margin: 14px 0; }
.example h4 { margin: 0 0 8px; font-size: 15px; }
.pair { display: grid; grid-template-columns: repeat(auto-fit, minmax(min(100%, 420px), 1fr)); gap: 12px; }
.pair > div { min-width: 0; }
.label { font-size: 13px; font-weight: 600; color: #3c4657; margin: 6px 0 2px; }
pre { background: #f6f8fa; border: 1px solid #e3e8ef; border-radius: 4px; padding: 8px; margin: 0;
      font: 12.5px/1.45 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
      white-space: pre-wrap; word-break: break-word; tab-size: 4; }
del { background: #ffd7d5; text-decoration: none; } ins { background: #ccf2d0; text-decoration: none; }
.mark { color: #8a94a6; }
.passed { color: #1a7f37; font-weight: 600; } .failed { color: #cf222e; font-weight: 600; }
.note { color: #5b6576; font-size: 13px; }
td .ci { color: #5b6576; font-size: 12px; }
.detail { font: 12px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; color: #5b6576;
          font-weight: 400; overflow-wrap: anywhere; }
@media (max-width: 600px) { body { padding: 12px; } h1 { font-size: 22px; } dl.info { grid-template-columns: 1fr; }
  dl.info dd { margin-bottom: 6px; } }
"""


def _visible(segment: str) -> str:
    """Escape a changed segment, marking whitespace that would otherwise not show."""
    text = escape(segment)
    if segment.strip():
        return text
    return text.replace("\t", '<span class="mark">→</span>\t').replace("\n", '<span class="mark">↵</span>\n')


def highlight_pair(before: str, after: str) -> tuple[str, str]:
    """HTML for both texts with the token-level differences marked (`<del>` left, `<ins>` right)."""
    old, new = _TOKEN.findall(before), _TOKEN.findall(after)
    left, right = [], []
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        removed, added = "".join(old[i1:i2]), "".join(new[j1:j2])
        if tag == "equal":
            left.append(escape(removed))
            right.append(escape(added))
            continue
        if removed:
            left.append(f"<del>{_visible(removed)}</del>")
        if added:
            right.append(f"<ins>{_visible(added)}</ins>")
    return "".join(left), "".join(right)


def _outcome(detail: str) -> str:
    """The outcome in the label (`passed`, `failed`); its detail on a line of its own below."""
    outcome, rest = split_detail(detail)
    css = "passed" if outcome == "passed" else "failed"
    more = f'<div class="detail">{escape(rest[:300])}</div>' if rest else ""
    return f'<span class="{css}">{escape(outcome)}</span>{more}'


def _example_html(example: Example) -> str:
    prompt_before, prompt_after = highlight_pair(example.nominal_prompt, example.perturbed_prompt)
    code_before, code_after = highlight_pair(example.nominal_completion, example.perturbed_completion)
    title = (f"{escape(example.task_id)} · {escape(example.transformation)} · seed {example.seed}"
             f" · sample {example.sample}")
    return f"""<div class="example"><h4>{title}</h4>
<div class="pair"><div><div class="label">Nominal prompt</div><pre>{prompt_before}</pre></div>
<div><div class="label">Perturbed prompt</div><pre>{prompt_after}</pre></div></div>
<div class="pair"><div><div class="label">Nominal completion: {_outcome(example.nominal_detail)}</div>
<pre>{code_before}</pre></div>
<div><div class="label">Perturbed completion: {_outcome(example.perturbed_detail)}</div>
<pre>{code_after}</pre></div></div></div>"""


def _stacked(cell: str) -> str:
    """A figure over its interval, in two lines (`25.0%` / `[17.0%, 34.0%]`), so a table of intervals fits a
    screen; a cell of two figures (`RR⁻ / RR⁺`) puts both points on the first line, both intervals below."""
    found = _WITH_INTERVAL.findall(cell)
    if not found or _WITH_INTERVAL.sub("", cell).strip(" /"):
        return cell
    points, intervals = " / ".join(p for p, _ in found), " / ".join(i for _, i in found)
    return f'{points}<br><span class="ci">{intervals}</span>'


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], numeric_from: int) -> str:
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(
            f'<td class="num">{_stacked(cell)}</td>' if i >= numeric_from else f"<td>{cell}</td>"
            for i, cell in enumerate(row)
        ) + "</tr>"
        for row in rows
    )
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def _info(run_info: Mapping[str, object]) -> str:
    items = "".join(f"<dt>{escape(label)}</dt><dd>{escape(text)}</dd>" for label, text in run_rows(run_info))
    return f'<dl class="info">{items}</dl>'


def _metrics_sections(metrics: RobustnessMetrics) -> list[str]:
    parts = []
    ks = metrics.ks
    nominal_rows = [
        [escape(kind), str(metrics.nominal_problems[kind])]
        + [with_interval(p[k], metrics.nominal_intervals.get(kind, {}).get(k)) for k in ks]
        for kind, p in metrics.nominal_pass.items()
    ]
    parts.append("<h2>Nominal</h2>" + _table(["Prompt", "Problems"] + [f"Pass@{k}" for k in ks], nominal_rows, 1))
    for k in ks:
        rows = [[escape(category_label(g.category)), escape(g.baseline), str(len(g.transformations))]
                + group_cells(g, k) for g in metrics.categories]
        parts.append(f"<h2>Categories (k={k})</h2>"
                     + _table(["Category", "Baseline", "Transf."] + metric_header(k, "<sub>s</sub>"), rows, 2))
    for k in ks:
        rows = [[escape(g.name), escape(category_label(g.category)), str(len(g.seeds))] + group_cells(g, k)
                for g in metrics.transformations]
        parts.append(f"<h2>Transformations (k={k})</h2>"
                     + _table(["Transformation", "Category", "Seeds"] + metric_header(k, "<sub>s</sub>"), rows, 2))
    return parts


def _figure(name: str, png: bytes, caption: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure><img alt="{escape(caption)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{escape(caption)}</figcaption></figure>")


def render_html(
    metrics: RobustnessMetrics,
    examples: Sequence[Example],
    run_info: Mapping[str, object],
    plots: Mapping[str, bytes],
    metrics_plus: RobustnessMetrics | None = None,
) -> str:
    """The whole report as one HTML string; `plots` maps a file name to its PNG bytes; `metrics_plus`
    (MBPP+) adds the base and base + extra inputs side by side."""
    title = "Robustness report"
    subject = " on ".join(str(run_info[key]) for key in ("model", "benchmark") if key in run_info)
    parts = [f"<h1>{title}</h1>", f'<p class="subtitle">{escape(subject)}</p>' if subject else "",
             "<h2>Run</h2>", _info(run_info)]
    parts += _metrics_sections(metrics)
    if metrics_plus is not None:
        parts += [f"<h2>{escape(TITLE)} (k={k})</h2>"
                  + _table([escape(h) for h in plus_header(k)],
                           [[escape(c) for c in row] for row in plus_rows(metrics, metrics_plus, k)], 1)
                  for k in metrics.ks]
    parts.append(f'<p class="note">{escape(method_note(metrics.bootstrap))}</p>')
    if plots:
        caption = captions(metrics.ks[0])
        parts.append(f"<h2>Figures (k={metrics.ks[0]})</h2>")
        figures = [_figure(name, png, caption.get(name, name)) for name, png in plots.items()
                   if name.startswith("categories_")]
        parts.append(f'<div class="pair">{"".join(figures)}</div>')
        parts += [_figure(name, png, caption.get(name, name)) for name, png in plots.items()
                  if not name.startswith("categories_")]
    parts.append("<h2>Examples: passed nominally, failed perturbed</h2>")
    if not examples:
        parts.append('<p class="note">No sample passed nominally and failed under a perturbation.</p>')
    for category in dict.fromkeys(e.category for e in examples):
        parts.append(f"<h3>{escape(category_label(category))}</h3>")
        parts += [_example_html(e) for e in examples if e.category == category]
    body = "\n".join(parts)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{title}</title><style>{CSS}</style></head>\n<body>\n{body}\n</body></html>\n")
