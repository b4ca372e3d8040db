"""`quench evaluate FILE`: the input is read, never written; every line is scored or named."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import pytest

from quench.cli.main import main
from quench.datasets import load_humaneval, partial_problem

OPENED: list[tuple[str, object, int]] = []  # (path, mode, flags) of every open() while recording


def record_opens(event: str, args: tuple) -> None:
    if event == "open" and RECORDING and isinstance(args[0], (str, os.PathLike)):
        OPENED.append((os.fspath(args[0]), args[1], args[2]))


RECORDING = False
sys.addaudithook(record_opens)  # a hook cannot be removed; it records only inside `opens_of`


def opens_of(path: Path, argv: list[str]) -> tuple[int, list[tuple[object, int]]]:
    """Run the CLI and return its exit code and how it opened `path` (mode, flags)."""
    global RECORDING
    OPENED.clear()
    RECORDING = True
    try:
        code = main(argv)
    finally:
        RECORDING = False
    return code, [(mode, flags) for name, mode, flags in OPENED if Path(name).resolve() == path.resolve()]


def read_only(mode: object, flags: int) -> bool:
    writes = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_TRUNC | os.O_CREAT
    return not (flags & writes) and not any(c in str(mode or "") for c in "wa+x")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): digest(p) for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def problems():
    return load_humaneval()[:3]


def evaluate(path: Path, out: Path, *extra: str) -> int:
    return main(["evaluate", str(path), "--out", str(out), "--workers", "1", "--k", "1", *extra])


def results(out: Path) -> dict[tuple[str, str, int], bool]:
    rows = [json.loads(row) for row in (out / "results.jsonl").read_text().splitlines()]
    return {(r["task_id"], r.get("variant", ""), r["sample_index"]): r["passed"] for r in rows}


def test_a_read_only_file_without_final_newline_is_unchanged_and_its_last_sample_scored(tmp_path, problems):
    path = tmp_path / "samples.jsonl"
    rows = [{"task_id": p.task_id, "completion": p.canonical_solution} for p in problems]
    rows[1]["completion"] = "    return None\n"
    path.write_text("\n".join(json.dumps(r) for r in rows))  # no newline after the last sample
    path.chmod(0o444)
    before = digest(path)
    code, opens = opens_of(path, ["evaluate", str(path), "--out", str(tmp_path / "out"), "--workers", "1", "--k", "1"])
    assert code == 0
    assert opens and all(read_only(mode, flags) for mode, flags in opens), opens
    assert digest(path) == before
    assert results(tmp_path / "out") == {("HumanEval/0", "", 0): True, ("HumanEval/1", "", 0): False,
                                         ("HumanEval/2", "", 0): True}  # numbered per task


@pytest.mark.parametrize("tail,where", [
    (b"\xff\xfe\x00garbage\n", ":2: not UTF-8"),
    (b'{"task_id": "HumanEval/1", "compl', ":2: not valid JSON"),
    (b'{"completion": "x"}\n', ":2: missing field(s): task_id"),
    (b'{"task_id": "HumanEval/1"}\n', ":2: missing field(s): completion"),
    (b'{"task_id": "HumanEval/0", "sample_index": 0, "completion": ""}\n', ":2: duplicate sample 0 of HumanEval/0"),
])
def test_a_bad_line_is_an_error_naming_it_and_nothing_is_written(tmp_path, problems, capsys, tail, where):
    path = tmp_path / "samples.jsonl"
    path.write_bytes(json.dumps({"task_id": "HumanEval/0", "sample_index": 0, "completion": ""}).encode() + b"\n" + tail)
    before = digest(path)
    assert evaluate(path, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert f"error: {path}{where}" in err and "Traceback" not in err
    assert digest(path) == before and not (tmp_path / "out").exists()


def test_skip_invalid_scores_the_rest_and_counts_what_it_skipped(tmp_path, problems, capsys):
    path = tmp_path / "samples.jsonl"
    good = [json.dumps({"task_id": p.task_id, "completion": p.canonical_solution}).encode() for p in problems[:2]]
    path.write_bytes(good[0] + b"\n\xc3\x28 not utf-8\n{torn\n" + good[1])
    assert evaluate(path, tmp_path / "out", "--skip-invalid") == 0
    captured = capsys.readouterr()
    assert f"skipped: {path}:2: not UTF-8" in captured.err and f"skipped: {path}:3: not valid JSON" in captured.err
    assert "skipped 2 invalid input line(s)" in captured.out
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["skipped_lines"] == 2 and summary["num_samples"] == 2 and summary["pass_at_k"]["pass@1"] == 1.0


def test_evalplus_solutions_are_whole_programs(tmp_path, problems):
    path = tmp_path / "evalplus.jsonl"
    rows = [{"task_id": p.task_id, "solution": p.prompt + p.canonical_solution} for p in problems[:2]]
    rows[1]["solution"] = problems[1].prompt + "    return []\n"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert evaluate(path, tmp_path / "out") == 0
    assert results(tmp_path / "out") == {("HumanEval/0", "", 0): True, ("HumanEval/1", "", 0): False}


def test_robustness_samples_are_scored_against_their_own_variant(tmp_path, problems):
    run = tmp_path / "run"
    run.mkdir()
    renamed = problems[0].with_changes(
        prompt=problems[0].prompt.replace(problems[0].entry_point, "closeElements"), entry_point="closeElements",
        canonical_solution=problems[0].canonical_solution, extra=(("perturbation", "FuncRenameCamelCase"), ("seed", "0")))
    (run / "variants.jsonl").write_text(json.dumps(renamed.to_json()) + "\n")
    partial = partial_problem(problems[1])
    rows = [
        {"task_id": problems[1].task_id, "variant": "nominal/partial", "completion": partial.canonical_solution},
        {"task_id": problems[1].task_id, "variant": "nominal/full", "completion": partial.canonical_solution},
        {"task_id": problems[0].task_id, "variant": "FuncRenameCamelCase/0", "completion": problems[0].canonical_solution},
    ]
    path = run / "samples.jsonl"
    path.write_text("".join(json.dumps({**r, "sample_index": 0}) + "\n" for r in rows))
    before = tree(run)
    assert evaluate(path, tmp_path / "out") == 0
    assert tree(run) == before
    assert results(tmp_path / "out") == {
        ("HumanEval/1", "nominal/partial", 0): True,  # the rest of a half-written body: right after the partial prompt
        ("HumanEval/1", "nominal/full", 0): False,  # the same text after the full prompt is not a program
        ("HumanEval/0", "FuncRenameCamelCase/0", 0): True,  # checked as closeElements, the variant's entry point
    }
    by_variant = json.loads((tmp_path / "out" / "summary.json").read_text())["by_variant"]
    assert by_variant["nominal/partial"]["pass_at_k"] == {"pass@1": 1.0}


def test_perturbed_samples_without_the_runs_variants_are_refused(tmp_path, capsys):
    path = tmp_path / "samples.jsonl"
    path.write_text(json.dumps({"task_id": "HumanEval/0", "variant": "tab_indent/0", "completion": ""}) + "\n")
    assert evaluate(path, tmp_path / "out") == 2
    assert "need the run's variants.jsonl beside them" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_result_is_reused_only_for_the_same_program_and_only_the_inputs_samples_count(tmp_path, problems):
    right = [{"task_id": p.task_id, "completion": p.canonical_solution} for p in problems]
    wrong = [{"task_id": p.task_id, "completion": "    return None\n"} for p in problems[:2]]
    for name, rows in (("right", right), ("wrong", wrong)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    assert evaluate(tmp_path / "right.jsonl", out) == 0
    assert evaluate(tmp_path / "wrong.jsonl", out) == 0  # same task ids and indices, other programs
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_samples"] == 2 and summary["pass_at_k"]["pass@1"] == 0.0
    assert evaluate(tmp_path / "right.jsonl", out) == 0  # all three on disk already: nothing runs again
    assert len((out / "results.jsonl").read_text().splitlines()) == 5
    assert json.loads((out / "summary.json").read_text())["pass_at_k"]["pass@1"] == 1.0
