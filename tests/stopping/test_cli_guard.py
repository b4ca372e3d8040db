"""`quench guard`: train and info on a small dataset directory; bad input exits 2 with a clear message."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from quench.cli import guard as guard_cli
from quench.errors import QuenchError
from quench.stopping.loading import read_guard, shipped_guard_path

def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="quench")
    guard_cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.handler(args)


def test_train_and_info(tmp_path: Path, capsys, make_synthetic) -> None:
    make_synthetic(answers=16, length=18).save(tmp_path / "data")
    out = tmp_path / "g.safetensors"
    assert run(["guard", "train", "--data", str(tmp_path / "data"), "--out", str(out), "--epochs", "3"]) == 0
    printed = capsys.readouterr().out
    assert "precision" in printed and "recall" in printed and out.is_file()
    assert run(["guard", "info", str(out)]) == 0
    assert '"hidden_size": 16' in capsys.readouterr().out


@pytest.mark.parametrize("argv,message", [
    (["guard", "build-data", "--out", "x", "--splits", "test"], "test data must stay unseen"),
    (["guard", "build-data", "--out", "x", "--max-new-tokens", "0"], "--max-new-tokens must be at least 1"),
    (["guard", "build-data", "--out", "x", "--benchmark", "mbpp,humaneval"], "HumanEval must stay unseen"),
    (["guard", "build-data", "--out", "x", "--benchmark", ","], "--benchmark: choose from"),
    (["guard", "build-data", "--out", "x", "--limit", "train:0"], "--limit must be at least 1"),
    (["guard", "build-data", "--out", "x", "--limit", "test:4"], "split 'test' is not in --splits"),
    (["guard", "build-data", "--out", "x", "--limit", "many"], "--limit: N or split:N"),
    (["guard", "train", "--data", "nowhere", "--out", "g.safetensors"], "--data nowhere: no such directory"),
    (["guard", "train", "--data", ".", "--out", "g.safetensors"], "not a guard dataset"),
    (["guard", "info", "missing.safetensors"], "guard file missing.safetensors: no such file"),
])
def test_bad_input(argv: list[str], message: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(QuenchError, match=message):
        run(argv)


def test_bad_policy(tmp_path: Path, make_synthetic) -> None:
    make_synthetic(answers=4, length=12).save(tmp_path / "data")
    with pytest.raises(QuenchError, match="threshold"):
        run(["guard", "train", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "g"), "--threshold", "2"])


def test_build_problems_interleave_benchmarks_and_splits() -> None:
    limits = guard_cli.parse_limits("train:3,validation:1", ["train", "validation"])
    assert limits == {"train": 3, "validation": 1}
    pairs = guard_cli.build_problems(["mbpp", "mbgp"], ["train", "validation"], limits)
    assert len(pairs) == 8
    assert [(s, p.language) for s, p in pairs[:4]] == [
        ("train", "python"), ("train", "go"), ("validation", "python"), ("validation", "go")]
    assert {p.task_id.split("/")[0] for _, p in pairs} == {"MBPP", "MBGP"}
    assert all(601 <= int(p.task_id.split("/")[1]) <= 974 for s, p in pairs if s == "train")
    assert guard_cli.parse_limits("5", ["train"]) == {"train": 5}


def with_languages(data, languages: tuple[str, ...] = ("python", "go")):
    """The synthetic answers spread over languages in runs of four (so each has validation answers)."""
    benchmark = {"python": "mbpp", "go": "mbgp", "java": "mbjp"}
    for a, record in enumerate(data.records):
        record["language"] = languages[(a // 4) % len(languages)]
        record["benchmark"] = benchmark[record["language"]]
    return data


def test_train_reports_each_language_and_selects_benchmarks(tmp_path: Path, capsys, make_synthetic) -> None:
    with_languages(make_synthetic(answers=24, length=18)).save(tmp_path / "data")
    out = tmp_path / "g.safetensors"
    assert run(["guard", "train", "--data", str(tmp_path / "data"), "--out", str(out), "--epochs", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("go ") for line in lines) and any(line.startswith("python ") for line in lines)
    assert run(["guard", "train", "--data", str(tmp_path / "data"), "--out", str(out), "--epochs", "3",
                "--benchmark", "mbpp"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert not any(line.startswith("go ") for line in lines)
    assert "(12 answers" in read_guard(out).info.trained_on
    with pytest.raises(QuenchError, match="the dataset has no mbjp answers"):
        run(["guard", "train", "--data", str(tmp_path / "data"), "--out", str(out), "--benchmark", "mbjp"])


def test_eval_per_language(tmp_path: Path, capsys, make_synthetic) -> None:
    data = with_languages(make_synthetic(answers=24, length=18), ("python", "java"))
    data.save(tmp_path / "data")
    out = tmp_path / "g.safetensors"
    assert run(["guard", "train", "--data", str(tmp_path / "data"), "--out", str(out), "--epochs", "3"]) == 0
    capsys.readouterr()
    assert run(["guard", "eval", str(out), "--data", str(tmp_path / "data"), "--answers", "all"]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[2:]}
    assert set(rows) == {"java", "python", "all"}
    assert rows["java"][1] == rows["python"][1] == "12" and rows["all"][1] == "24"  # answers per language
    with pytest.raises(QuenchError, match="ships no GenGuard for model synthetic"):
        run(["guard", "eval", "auto", "--data", str(tmp_path / "data")])
    shipped = str(shipped_guard_path("smollm2-135m-instruct"))
    with pytest.raises(QuenchError, match="trained for hidden size 576.*the model has hidden size 16"):
        run(["guard", "eval", shipped, "--data", str(tmp_path / "data")])
    with pytest.raises(QuenchError, match="--threshold must be between 0 and 1"):
        run(["guard", "eval", str(out), "--data", str(tmp_path / "data"), "--threshold", "1.5"])
