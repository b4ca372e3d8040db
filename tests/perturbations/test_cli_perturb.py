"""`quench perturb`: --list, a small run with files and stats, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quench.cli.main import main


def test_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["perturb", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 29
    assert lines[0].split()[:2] == ["BackTranslation", "docstring"] and lines[0].endswith("[model]")


def test_small_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["perturb", "--benchmark", "humaneval", "--limit", "3", "--seeds", "2", "--no-validate",
                 "--transforms", "ChangeCharCase,tab_indent", "--out", str(tmp_path)])
    assert code == 0
    out = capsys.readouterr().out
    assert "ChangeCharCase" in out and "tab_indent" in out and "wrote 4 files" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "humaneval_ChangeCharCase_s0.jsonl", "humaneval_ChangeCharCase_s1.jsonl",
        "humaneval_tab_indent_s0.jsonl", "humaneval_tab_indent_s1.jsonl", "summary.json"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["transformations"]["tab_indent"]["share_changed"] == 1.0


def test_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["perturb", "--transforms", "NoSuchThing", "--out", str(tmp_path)]) == 2
    assert "unknown perturbation 'NoSuchThing'" in capsys.readouterr().err
    assert main(["perturb", "--categories", "colour", "--out", str(tmp_path)]) == 2
    assert main(["perturb", "--limit", "2"]) == 2
