"""`quench run --ray auto` gives what the same run gives on one machine, and leaves no Ray process behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

ARGS = ["run", "--tasks", "0-3", "--samples", "2", "--temperature", "0.8", "--seed", "7", "--max-new-tokens", "24",
        "--backend", "quench", "--batch-size", "2", "--dtype", "float32", "--timeout", "5", "--workers", "2"]


def quench(out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "quench.cli.main", *ARGS, *extra, "--out", str(out)],
                          capture_output=True, text=True, timeout=900)


def completions(out: Path) -> dict[tuple[str, int], str]:
    rows = map(json.loads, (out / "samples.jsonl").read_text().splitlines())
    return {(r["task_id"], r["sample_index"]): r["completion"] for r in rows}


def verdicts(out: Path) -> dict[tuple[str, int], str]:
    rows = map(json.loads, (out / "results.jsonl").read_text().splitlines())
    return {(r["task_id"], r["sample_index"]): r["outcome"] for r in rows}


def test_run_on_a_local_ray_runtime_equals_the_local_run(tmp_path: Path) -> None:
    local = quench(tmp_path / "local")
    assert local.returncode == 0, local.stderr[-2000:]
    spread = quench(tmp_path / "ray", "--ray", "auto", "--ray-actors", "2", "--ray-cpus-per-actor", "1")
    assert spread.returncode == 0, spread.stderr[-2000:]

    assert len(completions(tmp_path / "ray")) == 8
    assert completions(tmp_path / "ray") == completions(tmp_path / "local")
    assert verdicts(tmp_path / "ray") == verdicts(tmp_path / "local")
    summary = lambda d: json.loads((tmp_path / d / "summary.json").read_text())  # noqa: E731
    assert summary("ray") == summary("local")


def test_bad_ray_address_is_a_clear_error(tmp_path: Path) -> None:
    result = quench(tmp_path / "bad", "--ray", "127.0.0.1:1")
    assert result.returncode == 2
    assert "--ray 127.0.0.1:1" in result.stderr and "no Ray head answers" in result.stderr
    assert not (tmp_path / "bad" / "samples.jsonl").exists()
