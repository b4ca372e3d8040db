"""pass@k in `summary.json` and on the console carries its 95% bootstrap interval over problems."""

from __future__ import annotations

import json
import random

import pytest

from quench.cli.main import main
from quench.datasets import load_humaneval
from quench.execution import Outcome
from quench.runs.evaluate import summarize
from quench.runs.records import ResultRecord


def results(passes: list[list[bool]]) -> list[ResultRecord]:
    """One result record per sample: problem i has the samples passes[i]."""
    return [
        ResultRecord(Outcome.passed if passed else Outcome.failed, passed, task_id=f"T/{i}", sample_index=j)
        for i, row in enumerate(passes) for j, passed in enumerate(row)
    ]


def test_the_interval_brackets_pass_at_1_and_is_seeded():
    rows = results([[True]] * 6 + [[False]] * 14)
    first, again = summarize(rows, (1,)).intervals[1], summarize(rows, (1,)).intervals[1]
    assert first == again and first.problems == 20 and first.point == 0.3
    assert 0.05 < first.low < 0.3 < first.high < 0.55


def test_problems_are_resampled_not_samples():
    """Every problem passes one of its two samples: pass@1 is 0.5 in every resample of the problems, so
    the bootstrap has no width and the small-count rule bounds it over the 12 problems instead."""
    interval = summarize(results([[True, False]] * 12), (1, 2)).intervals
    assert interval[1].method == "wilson" and interval[1].low == pytest.approx(0.2538, abs=1e-4)
    assert interval[2].method == "exact" and (interval[2].low, interval[2].high) == (pytest.approx(0.025 ** (1 / 12)), 1.0)


def test_the_same_results_in_another_order_give_the_same_interval():
    # 3 of 20 problems pass: the resamples are drawn over problems sorted by task id, not in file order
    rows = results([[i in (2, 4, 6)] for i in range(20)])
    shuffled = rows[:]
    random.Random(1).shuffle(shuffled)
    assert summarize(rows, (1,)).intervals == summarize(shuffled, (1,)).intervals
    assert summarize(rows, (1,)).intervals == summarize(rows[::-1], (1,)).intervals


def test_no_pass_in_four_problems_is_not_a_certain_zero():
    interval = summarize(results([[False]] * 4), (1,)).intervals[1]
    assert interval.point == 0.0 and interval.low == 0.0 and interval.method == "exact"
    assert interval.high == pytest.approx(1 - 0.025 ** (1 / 4))  # Clopper-Pearson: 0.602
    every = summarize(results([[True]] * 4), (1,)).intervals[1]
    assert every.high == 1.0 and every.low == pytest.approx(0.025 ** (1 / 4))


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


def write_samples(path, problems, passing: set[int], order: list[int]) -> None:
    completions = [p.canonical_solution if i in passing else "    return None\n" for i, p in enumerate(problems)]
    path.write_text("".join(json.dumps({"task_id": problems[i].task_id, "completion": completions[i]}) + "\n"
                            for i in order))


def test_evaluate_gives_identical_intervals_for_a_shuffled_copy(tmp_path):
    problems = load_humaneval()[:20]
    order = list(range(20))
    shuffled = order[:]
    random.Random(0).shuffle(shuffled)
    summaries = []
    for name, rows in (("sorted", order), ("shuffled", shuffled)):
        (tmp_path / name).mkdir()
        write_samples(tmp_path / name / "samples.jsonl", problems, {2, 4, 6}, rows)
        assert main(["evaluate", str(tmp_path / name / "samples.jsonl"), "--workers", "1", "--k", "1"]) == 0
        summaries.append(json.loads((tmp_path / name / "summary.json").read_text()))
    assert summaries[0]["pass_at_k_intervals"] == summaries[1]["pass_at_k_intervals"]
    # summary.json keeps fractions, rounded: no float noise in the file
    bounds = summaries[0]["pass_at_k_intervals"]["pass@1"]
    assert all(len(repr(bounds[key]).split(".")[-1]) <= 6 for key in ("point", "low", "high"))
