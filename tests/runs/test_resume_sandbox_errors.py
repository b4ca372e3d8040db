"""A resumed evaluation executes again what the harness failed (sandbox_error) and keeps every other verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sandbox_helpers import open_pool, skip_reason

from quench.execution import Outcome
from quench.runs.evaluate import execute_pending, read_results
from quench.runs.records import ExecutionKey

PASSES = "assert 1 + 1 == 2\n"
FAILS = "assert 1 + 1 == 3\n"


def record(task: str, outcome: str, passed: bool) -> dict:
    return {"task_id": task, "sample_index": 0, "program_id": task, "outcome": outcome, "passed": passed,
            "detail": "", "seconds": 0.0}


def test_a_sandbox_error_is_executed_again_on_resume(tmp_path: Path) -> None:
    reason = skip_reason("bwrap")
    if reason is not None:
        pytest.skip(reason)
    path = tmp_path / "results.jsonl"
    earlier = [record("kept", "failed", False), record("harness", "sandbox_error", False)]
    path.write_text("".join(json.dumps(r) + "\n" for r in earlier), encoding="utf-8")
    # Were "kept" executed again it would pass: its recorded verdict must stand.
    jobs = [(ExecutionKey("kept", None, 0, "kept"), PASSES), (ExecutionKey("harness", None, 0, "harness"), PASSES)]
    with open_pool("bwrap", workers=1) as pool:
        records = execute_pending(jobs, pool, path)
    expected = [("kept", Outcome.failed), ("harness", Outcome.passed)]
    assert [(r.task_id, r.outcome) for r in records] == expected
    assert [(r.task_id, r.outcome) for r in read_results(path)] == expected
