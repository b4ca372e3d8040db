"""MBXP's benchmarks through the real CLI: bad combinations end in one `error:` line, exit 2, before any work."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

QUENCH = [sys.executable, "-m", "quench.cli.main"]


def quench(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*QUENCH, *args], capture_output=True, text=True, timeout=120, env=env)


def test_recode_profile_refuses_other_languages(tmp_path: Path) -> None:
    for command in (("perturb", "--benchmark", "mbjsp", "--profile", "recode", "--out", str(tmp_path / "p")),
                    ("robustness", "--benchmark", "mbcpp", "--profile", "recode", "--tasks", "11",
                     "--out", str(tmp_path / "r"))):
        done = quench(*command)
        assert done.returncode == 2, done.stderr
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith(f"error: --benchmark {command[2]}: --profile recode reproduces ReCode's Python"), last
    assert not (tmp_path / "p").exists() and not (tmp_path / "r").exists()


@pytest.mark.parametrize(("benchmark", "tool"), [("mbgp", "go"), ("mbjsp", "node"), ("mbcpp", "g++"), ("mbjp", "java")])
def test_a_missing_toolchain_is_named_before_the_model_loads(tmp_path: Path, benchmark: str, tool: str) -> None:
    bin_dir = tmp_path / "bin"  # bubblewrap, and no toolchain
    bin_dir.mkdir()
    bwrap = shutil.which("bwrap")
    if bwrap is not None:
        (bin_dir / "bwrap").symlink_to(bwrap)
    env = {**os.environ, "PATH": str(bin_dir)}
    done = quench("run", "--benchmark", benchmark, "--tasks", "11", "--out", str(tmp_path / "run"), env=env)
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: --benchmark {benchmark}: its programs need {tool}"), last
    assert "loading" not in done.stderr and not (tmp_path / "run").exists()


def test_evaluate_takes_the_benchmark_from_mbxp_task_ids(tmp_path: Path) -> None:
    if shutil.which("node") is None or shutil.which("bwrap") is None:
        pytest.skip("needs node and bubblewrap")
    from quench.datasets import load_benchmark

    [problem] = load_benchmark("mbjsp", tasks=["20"])
    rows = [{"task_id": problem.task_id, "sample_index": 0, "completion": problem.canonical_solution},
            {"task_id": problem.task_id, "sample_index": 1, "completion": "    return (;\n}\n"}]
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps(row) + "\n" for row in rows))
    done = quench("evaluate", str(samples), "--out", str(tmp_path / "eval"), "--workers", "1")
    assert done.returncode == 0, done.stderr
    results = [json.loads(line) for line in (tmp_path / "eval" / "results.jsonl").read_text().splitlines()]
    assert sorted(r["outcome"] for r in results) == ["compile_error", "passed"]
