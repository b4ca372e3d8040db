"""`quench robustness --benchmark mbjsp` end to end through the real CLI, with a tiny model built here."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import save_tiny_model

TRANSFORMS = "ButterFingersPerturbation,FuncRenameCamelCase,tab_indent,new_line_afterdoc,DeadCodeInserter,split_lines"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")
def test_a_small_mbjsp_robustness_run_ends_in_a_report(tmp_path: Path) -> None:
    model = save_tiny_model(tmp_path / "tiny")
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "quench.cli.main", "robustness", "--benchmark", "mbjsp", "--tasks", "11,13",
            "--model", str(model), "--transforms", TRANSFORMS, "--seeds", "1", "--max-new-tokens", "16",
            "--batch-size", "2", "--timeout", "10", "--out", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "DeadCodeInserter: not applicable to JavaScript" in done.stderr
    assert "split_lines: not applicable to JavaScript" in done.stderr
    payload = json.loads((out / "metrics.json").read_text())
    names = {t["name"] for t in payload["metrics"]["transformations"]}
    assert names == {"ButterFingersPerturbation", "FuncRenameCamelCase", "tab_indent", "new_line_afterdoc"}
    assert "DeadCodeInserter: not applicable to JavaScript" in payload["run_info"]["not_applicable"]
    assert "not applicable to JavaScript" in (out / "report.md").read_text()
    variants = [json.loads(line) for line in (out / "variants.jsonl").read_text().splitlines()]
    renamed = [v for v in variants if dict(v["extra"]).get("perturbation") == "FuncRenameCamelCase"]
    assert renamed and all(v["entry_point"] in v["test"] and v["language"] == "javascript" for v in renamed)
    executions = [json.loads(line) for line in (out / "executions.jsonl").read_text().splitlines()]
    assert executions and all(e["outcome"] in ("passed", "failed", "compile_error", "timeout") for e in executions)
