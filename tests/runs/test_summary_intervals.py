"""pass@k in `summary.json` and on the console carries its 95% bootstrap interval over problems."""

from __future__ import annotations

import json

from quench.cli.main import main
from quench.datasets import load_humaneval
from quench.runs.evaluate import summarize


def results(passes: list[list[bool]]) -> list[dict]:
    """One result row per sample: problem i has the samples passes[i]."""
    return [
        {"task_id": f"T/{i}", "sample_index": j, "passed": passed, "outcome": "passed" if passed else "failed"}
        for i, row in enumerate(passes) for j, passed in enumerate(row)
    ]


def test_the_interval_brackets_pass_at_1_and_is_seeded():
    rows = results([[True]] * 6 + [[False]] * 14)
    first, again = summarize(rows, (1,)).intervals[1], summarize(rows, (1,)).intervals[1]
    assert first == again and first.problems == 20 and first.point == 0.3
    assert 0.05 < first.low < 0.3 < first.high < 0.55


def test_problems_are_resampled_not_samples():
    """Every problem passes one of its two samples: pass@1 is 0.5 in every resample of the problems."""
    interval = summarize(results([[True, False]] * 12), (1, 2)).intervals
    assert (interval[1].low, interval[1].high) == (0.5, 0.5)
    assert (interval[2].low, interval[2].high) == (1.0, 1.0)


def test_evaluate_writes_and_prints_the_interval(tmp_path, capsys):
    problems = load_humaneval()[:4]
    samples = tmp_path / "samples.jsonl"
    completions = [p.canonical_solution if i < 2 else "    return None\n" for i, p in enumerate(problems)]
    samples.write_text("".join(json.dumps({"task_id": p.task_id, "completion": c}) + "\n"
                               for p, c in zip(problems, completions)))
    assert main(["evaluate", str(samples), "--out", str(tmp_path / "out"), "--workers", "1", "--k", "1"]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    bounds = summary["pass_at_k_intervals"]["pass@1"]
    assert bounds["point"] == 0.5 and bounds["problems"] == 4 and bounds["low"] < 0.5 < bounds["high"]
    # people read percent with one decimal; summary.json keeps the fractions
    assert f"pass@1 50.0% [{100 * bounds['low']:.1f}%, {100 * bounds['high']:.1f}%]" in capsys.readouterr().out
