"""The report files: written, self-contained HTML, decodable images, round-tripping JSON."""

import base64
import io
import json
from html.parser import HTMLParser

import pytest
from PIL import Image

from quench.robustness import (
    Example,
    RobustnessRun,
    VariantOutcomes,
    load_examples,
    load_metrics,
    robustness_metrics,
    write_report,
)
from quench.robustness.html import highlight_pair
from quench.robustness.metrics import RobustnessMetrics
from quench.stats.figures import rounded
from quench.stats.intervals import BootstrapConfig
from quench.robustness.report import console_summary, load_outcomes

T, F = True, False

PROMPT = '''def add(a, b):
    """Return the sum of a and b; see http://example.com/add <b>docs</b>.
    >>> add(1, 2)
    3
    """
'''


def small_run(samples: int = 1) -> RobustnessRun:
    def outcomes(*passed):
        return {f"T/{i}": (p,) * samples for i, p in enumerate(passed)}

    return RobustnessRun(
        nominal_full=outcomes(T, T, F),
        nominal_partial=outcomes(T, F, F),
        variants=(
            VariantOutcomes("ButterFingersPerturbation", "docstring", 0, outcomes(F, T, F)),
            VariantOutcomes("ButterFingersPerturbation", "docstring", 1, outcomes(T, T, T)),
            VariantOutcomes("FuncRenameCamelCase", "function_name", 0, outcomes(T, T, F)),
            VariantOutcomes("new_lines", "code_format", 0, {"T/0": (F,) * samples}),
        ),
    )


EXAMPLES = [
    Example("T/0", "ButterFingersPerturbation", "docstring", 0, PROMPT, PROMPT.replace("sum", "sim"),
            "    return a + b\n", "    return a - b\n", "passed", "failed: AssertionError"),
    Example("T/0", "new_lines", "code_format", 0, PROMPT + "    c = a\n", PROMPT + "\n    c = a\n",
            "    return c + b\n", "    return b\n", "passed", "failed: NameError <c>"),
]
RUN_INFO = {"model": "tiny", "benchmark": "humaneval", "subset": "3 tasks", "seeds": [0, 1], "n": 1,
            "wall_time_s": 1.5, "stop": ["```", "\ndef "], "perturbed_dir": None, "guard": None}


class _Collector(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.attrs = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [(tag, name, value) for name, value in attrs]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    metrics = robustness_metrics(small_run())
    return out, metrics, write_report(out, metrics, EXAMPLES, RUN_INFO, run=small_run())


def test_every_report_file_is_written(report):
    out, _, paths = report
    names = {"metrics.json", "examples.jsonl", "report.md", "report.html", "categories_pass.png",
             "categories_drop.png", "transformations_heatmap.png", "outcomes.json"}
    assert {p.name for p in paths} == names
    assert all(p.parent == out and p.stat().st_size > 0 for p in paths)


def test_html_is_self_contained(report):
    out, _, _ = report
    html = (out / "report.html").read_text(encoding="utf-8")
    collector = _Collector()
    collector.feed(html)
    assert not {"script", "link", "iframe", "object"} & set(collector.tags)
    for tag, name, value in collector.attrs:
        assert name != "href", (tag, value)
        if name == "src":
            assert value.startswith("data:image/png;base64,"), (tag, value[:60])
    assert sum(tag == "img" for tag in collector.tags) == 3
    # The URL and markup in the docstring are text, escaped, never a link or a tag.
    assert "see http://example.com/add &lt;b&gt;docs&lt;/b&gt;" in html
    assert "NameError &lt;c&gt;" in html


def test_images_decode(report):
    out, _, _ = report
    html = (out / "report.html").read_text(encoding="utf-8")
    collector = _Collector()
    collector.feed(html)
    embedded = [base64.b64decode(v.split(",", 1)[1]) for _, n, v in collector.attrs if n == "src"]
    files = [p.read_bytes() for p in sorted(out.glob("*.png"))]
    assert sorted(embedded) == sorted(files)
    for png in files:
        image = Image.open(io.BytesIO(png))
        image.load()
        assert image.format == "PNG" and image.width > 300 and image.height > 200


def test_metrics_json_and_examples_round_trip(report):
    out, metrics, _ = report
    # metrics.json holds the figures rounded to 6 decimals: the metrics as the file says them
    assert load_metrics(out / "metrics.json") == (RobustnessMetrics.from_json(rounded(metrics.to_json())), RUN_INFO)
    assert json.loads((out / "metrics.json").read_text())["metrics"]["ks"] == [1]
    assert load_examples(out / "examples.jsonl") == EXAMPLES
    assert load_outcomes(out / "outcomes.json") == small_run()
    interval = json.loads((out / "metrics.json").read_text())["metrics"]["categories"][0]["intervals"]["1"]
    assert interval["robust_pass"] == {"point": 0.333333, "low": 0.0, "high": 1.0, "problems": 3, "method": "bootstrap"}
    assert interval["robust_drop"]["note"] == "too few nominal passes"


def test_markdown_tables(report):
    out, _, _ = report
    markdown = (out / "report.md").read_text(encoding="utf-8")
    assert "| Category | Baseline | Transf. | Pass@1 | RP_s@1 | RD_s@1 | RR_s@1 |" in markdown
    # Docstring: nominal T/0, T/1 pass; worst case over seeds loses T/0 → RP 33.3, RD 50.0;
    # T/0 (pass → fail) and T/2 (fail → pass under seed 1) changed → RR 66.7; 6 of 6 variants valid.
    # Three problems: every interval that can move spans [0, 100]; RD rests on 2 nominal passes (< 10).
    assert ("| Docstring | full | 1 | 66.7% [0.0%, 100.0%] | 33.3% [0.0%, 100.0%] | too few nominal passes | "
            "66.7% [0.0%, 100.0%] | 33.3% [0.0%, 100.0%] / 33.3% [0.0%, 100.0%] | 6/6 | 6 |") in markdown
    # new_lines: valid only for T/0 (1 of 3); it fails there: RP 0 in every resample, so the bound is
    # Clopper-Pearson's for 0 of 3 (70.8%), not a certain [0.0%, 0.0%].
    assert ("| new_lines | Code format | 1 | 33.3% [0.0%, 100.0%] | 0.0% [0.0%, 70.8%] | too few nominal passes | "
            "33.3% [0.0%, 100.0%] | 33.3% [0.0%, 100.0%] / 0.0% [0.0%, 70.8%] | 1/3 | 1 |") in markdown
    assert "![Figure 1](categories_pass.png)" in markdown
    assert "*Figure 2. Robust Drop@1" in markdown  # every figure has a caption
    assert "-    \"\"\"Return the sum of a and b" in markdown  # the prompt diff


def test_run_section_is_readable(report):
    out, _, _ = report
    markdown = (out / "report.md").read_text(encoding="utf-8")
    run = markdown.split("## Nominal")[0]
    assert "None" not in run and "perturbed" not in run and "guard" not in run  # unset settings are left out
    assert "| stop | 2 sequences: '\\`\\`\\`', '\\ndef ' |" in run  # backticks escaped, newline shown as \n
    assert "| samples per prompt (n) | 1 |" in run
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "<dt>stop</dt><dd>2 sequences: &#x27;```&#x27;, &#x27;\\ndef &#x27;</dd>" in html
    assert html.count("<figcaption>Figure ") == 3


def test_console_summary_uses_the_reports_percent_units(report):
    _, metrics, _ = report
    lines = console_summary(metrics, {"distinct_prompts": 9, "distinct_programs": 7, "seconds": 2.5})
    assert lines[0] == ("nominal Pass@1 (95% interval): full prompt 66.7% [0.0%, 100.0%], "
                        "partial prompt 33.3% [0.0%, 100.0%]")
    assert lines[2].split() == ["docstring", "33.3%", "[0.0%,", "100.0%]", "too", "few", "nominal", "passes",
                                "66.7%", "[0.0%,", "100.0%]", "3", "of", "3", "(few)"]
    assert lines[-1] == "9 distinct prompts generated, 7 distinct programs run, 2.5 s"


def test_drop_shows_its_interval_with_enough_nominal_passes(tmp_path):
    metrics = robustness_metrics(small_run(), bootstrap=BootstrapConfig(min_nominal_passes=2))
    write_report(tmp_path, metrics, [], RUN_INFO)
    markdown = (tmp_path / "report.md").read_text(encoding="utf-8")
    # Docstring RD = 50: resamples drawing only T/1 give 0, only T/0 give 100.
    assert "| Docstring | full | 1 | 66.7% [0.0%, 100.0%] | 33.3% [0.0%, 100.0%] | 50.0% [0.0%, 100.0%] |" in markdown


def test_sampling_report_has_a_table_per_k_and_no_examples(tmp_path):
    metrics = robustness_metrics(small_run(samples=2), ks=(1, 2))
    write_report(tmp_path, metrics, [], RUN_INFO | {"n": 2})
    markdown = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "## Categories (k=2)" in markdown and "## Transformations (k=2)" in markdown
    assert "No sample passed nominally and failed under a perturbation." in markdown
    assert load_metrics(tmp_path / "metrics.json")[0] == RobustnessMetrics.from_json(rounded(metrics.to_json()))


def test_highlight_marks_changed_tokens_and_invisible_whitespace():
    assert highlight_pair("a b c", "a x c") == ("a <del>b</del> c", "a <ins>x</ins> c")
    assert highlight_pair("a\nb", "a\n\nb") == ("a\nb", 'a\n<ins><span class="mark">↵</span>\n</ins>b')
    assert highlight_pair("    x", "\tx") == (
        "<del>    </del>x", '<ins><span class="mark">→</span>\t</ins>x')
    assert highlight_pair("<a>", "<b>") == ("&lt;<del>a</del>&gt;", "&lt;<ins>b</ins>&gt;")


def test_mbpp_plus_figures_appear_in_both_reports_with_intervals(tmp_path):
    base = robustness_metrics(small_run())
    plus_run = small_run()
    plus = robustness_metrics(RobustnessRun({**plus_run.nominal_full, "T/1": (F,)}, plus_run.variants,
                                            plus_run.nominal_partial))
    write_report(tmp_path, base, [], RUN_INFO, metrics_plus=plus)
    markdown = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "## MBPP+: base inputs and base + extra inputs (k=1)" in markdown
    row = next(line for line in markdown.splitlines() if line.startswith("| docstring |"))
    # Pass@1 on base inputs 2 of 3, on base + extra 1 of 3: each with its interval
    assert row.startswith("| docstring | 66.7% [0.0%, 100.0%] | 33.3% [0.0%, 100.0%] |")
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "<h2>MBPP+: base inputs and base + extra inputs (k=1)</h2>" in html
    assert ('<td>docstring</td><td class="num">66.7%<br><span class="ci">[0.0%, 100.0%]</span></td>'
            '<td class="num">33.3%<br><span class="ci">[0.0%, 100.0%]</span></td>') in html
    write_report(tmp_path / "humaneval", base, [], RUN_INFO)
    assert "MBPP+" not in (tmp_path / "humaneval" / "report.md").read_text(encoding="utf-8")


def test_a_row_resting_on_few_changed_problems_says_so_everywhere(tmp_path):
    # 30 problems: SynonymSubstitution changes the prompt of 4, ButterFingers of 25; the docstring
    # category changes 25 (the union), so only SynonymSubstitution is flagged.
    tasks = [f"T/{i:02d}" for i in range(30)]
    nominal = {t: (i % 2 == 0,) for i, t in enumerate(tasks)}
    run = RobustnessRun(nominal_full=nominal, variants=(
        VariantOutcomes("SynonymSubstitution", "docstring", 0, nominal, frozenset(tasks[4:])),
        VariantOutcomes("ButterFingersPerturbation", "docstring", 0, nominal, frozenset(tasks[25:])),
    ))
    metrics = robustness_metrics(run)
    by_name = {g.name: g for g in metrics.transformations}
    assert (by_name["SynonymSubstitution"].problems_changed, by_name["SynonymSubstitution"].few_changed) == (4, True)
    assert (by_name["ButterFingersPerturbation"].problems_changed, metrics.categories[0].few_changed) == (25, False)
    write_report(tmp_path, metrics, [], RUN_INFO)
    rows = json.loads((tmp_path / "metrics.json").read_text())["metrics"]["transformations"]
    flagged = {row["name"]: (row["problems_changed"], row["few_changed"], row["min_changed_problems"]) for row in rows}
    assert flagged == {"SynonymSubstitution": (4, True, 20), "ButterFingersPerturbation": (25, False, 20)}
    markdown = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert next(line for line in markdown.splitlines() if line.startswith("| SynonymSubstitution |")).endswith(
        "| 4 of 30 (few) |")
    assert next(line for line in markdown.splitlines() if line.startswith("| ButterFingersPerturbation |")).endswith(
        "| 25 of 30 |")
    assert "4 of 30 (few)" in (tmp_path / "report.html").read_text(encoding="utf-8")
    lines = console_summary(metrics, {})
    assert lines[2].endswith("25 of 30")
    assert lines[3] == ("(few): fewer than 20 problems changed, the figures describe those alone; "
                        "transformations: SynonymSubstitution 4 of 30")


def test_settings_read_as_text_and_example_headings_show_the_outcome(tmp_path):
    info = RUN_INFO | {"same_model_input": {"SynonymSubstitution": 0, "tab_indent": 3}}
    plus_failure = EXAMPLES[0].__class__(**{**EXAMPLES[0].to_json(),
                                            "nominal_detail": "passed: PlusTestFailed: add(10**9, 1)"})
    write_report(tmp_path, robustness_metrics(small_run()), [plus_failure], info)
    markdown = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert ("| variants the prompt format cancels (changed prompt, same model input) | tab_indent: 3 |"
            in markdown)  # text, not {'SynonymSubstitution': 0, ...}
    assert "Nominal: passed. Perturbed: failed." in markdown
    assert "Nominal detail: `PlusTestFailed: add(10**9, 1)`" in markdown
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "{&#x27;" not in html and "tab_indent: 3" in html
    assert ('Nominal completion: <span class="passed">passed</span>'
            '<div class="detail">PlusTestFailed: add(10**9, 1)</div>') in html


def test_html_tables_scroll_in_their_own_box_and_pairs_stack(report):
    out, _, _ = report
    html = (out / "report.html").read_text(encoding="utf-8")
    assert html.count('<div class="scroll"><table>') == html.count("<table>") > 0
    assert ".scroll { overflow-x: auto;" in html
    assert "grid-template-columns: repeat(auto-fit, minmax(min(100%, 420px), 1fr))" in html
    # a figure over its interval, and a pair of figures over their pair of intervals, so the tables fit
    assert '<td class="num">33.3% / 33.3%<br><span class="ci">[0.0%, 100.0%] / [0.0%, 100.0%]</span></td>' in html
    assert '<td class="num">too few nominal passes</td>' in html
