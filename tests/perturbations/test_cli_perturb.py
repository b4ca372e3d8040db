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
    assert "ChangeCharCase" in out and "tab_indent" in out and "wrote 4 variant files" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "humaneval_ChangeCharCase_s0.jsonl", "humaneval_ChangeCharCase_s1.jsonl", "humaneval_partial.jsonl",
        "humaneval_tab_indent_s0.jsonl", "humaneval_tab_indent_s1.jsonl", "summary.json"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["transformations"]["tab_indent"]["share_changed"] == 1.0
    assert summary["profile"] == "quench"


def test_nominal_partial_file_is_the_baseline_of_the_code_variants(tmp_path: Path) -> None:
    assert main(["perturb", "--benchmark", "humaneval", "--limit", "4", "--seeds", "1", "--no-validate",
                 "--profile", "recode", "--transforms", "new_line_aftercode", "--out", str(tmp_path)]) == 0
    nominal = [json.loads(line) for line in (tmp_path / "humaneval_partial.jsonl").read_text().splitlines()]
    variants = [json.loads(line) for line in (tmp_path / "humaneval_new_line_aftercode_s0.jsonl").read_text().splitlines()]
    assert [n["task_id"] for n in nominal] == [f"HumanEval/{i}" for i in range(4)]
    assert list(nominal[0]) == ["task_id", "prompt", "entry_point", "canonical_solution", "test", "partial"]
    for base, variant in zip(nominal, variants):
        assert variant["prompt"] == base["prompt"] + "\n"
        assert variant["partial"] == base["partial"]


def test_profile_is_recorded_and_a_bad_one_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["perturb", "--limit", "1", "--seeds", "1", "--no-validate", "--profile", "recode",
                 "--transforms", "tab_indent", "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "summary.json").read_text())["profile"] == "recode"
    with pytest.raises(SystemExit) as exit_info:
        main(["perturb", "--profile", "nlaug", "--out", str(tmp_path / "x")])
    assert exit_info.value.code == 2
    assert "--profile" in capsys.readouterr().err and not (tmp_path / "x").exists()


def test_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["perturb", "--transforms", "NoSuchThing", "--out", str(tmp_path)]) == 2
    assert "unknown perturbation 'NoSuchThing'" in capsys.readouterr().err
    assert main(["perturb", "--categories", "colour", "--out", str(tmp_path)]) == 2
    assert main(["perturb", "--limit", "2"]) == 2


def test_robustness_refuses_a_missing_baseline_file_before_loading_a_model(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "humaneval_partial.jsonl"
    code = main(["robustness", "--profile", "recode", "--nominal-partial", str(missing), "--out", str(tmp_path / "run")])
    assert code == 2
    err = capsys.readouterr().err
    assert f"--nominal-partial {missing}: no such file" in err and "loading" not in err
    assert not (tmp_path / "run").exists()
