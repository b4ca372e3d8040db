"""`quench run` killed with SIGKILL and started again ends with the same figures, nothing twice."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ARGS = ["run", "--tasks", "0-3", "--max-new-tokens", "32", "--batch-size", "2", "--timeout", "5"]


def quench(out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "quench.cli.main", *ARGS, "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def keys(path: Path) -> list[tuple[str, int]]:
    return [(r["task_id"], r["sample_index"]) for r in map(json.loads, path.read_text().splitlines())]


@pytest.mark.slow
@pytest.mark.timeout(1800)  # three real-model runs; slow on a loaded machine
def test_sigkill_then_resume_matches_uninterrupted_run(tmp_path):
    whole = quench(tmp_path / "whole")
    assert whole.wait(timeout=600) == 0, whole.stdout.read().decode()[-2000:]

    killed = quench(tmp_path / "killed")
    deadline = time.time() + 300
    while lines(tmp_path / "killed" / "samples.jsonl") < 2 and time.time() < deadline:
        time.sleep(0.2)
    os.killpg(killed.pid, signal.SIGKILL)  # in the middle of generation
    killed.wait()
    assert 2 <= lines(tmp_path / "killed" / "samples.jsonl") < 4

    resumed = quench(tmp_path / "killed")
    assert resumed.wait(timeout=600) == 0, resumed.stdout.read().decode()[-2000:]

    for name in ("samples.jsonl", "results.jsonl"):
        got = keys(tmp_path / "killed" / name)
        assert len(got) == len(set(got)) == 4  # nothing lost, nothing twice
    summary = lambda d: json.loads((tmp_path / d / "summary.json").read_text())  # noqa: E731
    assert summary("killed") == summary("whole")
    by_key = lambda d: {(r["task_id"], r["sample_index"]): r["completion"]  # noqa: E731
                        for r in map(json.loads, (tmp_path / d / "samples.jsonl").read_text().splitlines())}
    assert by_key("killed") == by_key("whole")
