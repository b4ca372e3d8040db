"""`quench run --benchmark mbpp+ --split test` end to end: pass@k and pass+@k in the summary, two verdicts per result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import save_tiny_model
from quench.cli.main import main


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUENCH_CACHE", str(tmp_path / "cache"))


def check_run(out: Path, problems: int) -> None:
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_problems"] == problems
    assert set(summary["pass_at_k"]) == {"pass@1"} and set(summary["pass_plus_at_k"]) == {"pass+@1"}
    assert set(summary["pass_plus_at_k_intervals"]["pass+@1"]) >= {"low", "high"}
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["task_id"] for r in results] and all({"passed", "passed_plus", "outcome_plus"} <= set(r) for r in results)
    assert all(r["passed"] or not r["passed_plus"] for r in results)  # plus includes base
    assert summary["plus_overturned"] == sum(r["passed"] and not r["passed_plus"] for r in results)


@pytest.mark.slow  # a model, a run and a sandbox: seconds on a quiet machine, minutes on a loaded one
def test_run_with_a_tiny_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = save_tiny_model(tmp_path / "tiny")
    out = tmp_path / "run"
    assert main(["--threads", "1", "run", "--model", str(model), "--benchmark", "mbpp+", "--split", "test",
                 "--limit", "3", "--max-new-tokens", "4", "--batch-size", "1", "--workers", "1", "--out", str(out)]) == 0
    check_run(out, 3)
    assert "pass+@1" in capsys.readouterr().out


@pytest.mark.slow
def test_run_with_the_default_model(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(["--threads", "1", "run", "--benchmark", "mbpp+", "--split", "test", "--limit", "3",
                 "--workers", "1", "--out", str(out)]) == 0
    check_run(out, 3)
