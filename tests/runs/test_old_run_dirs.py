"""Run directories written by an earlier quench resume, evaluate and report unchanged.

fixtures/run_dirs/ holds two run directories written by quench at commit d7128c1 (SmolLM2-135M-Instruct):
  run/:         quench run --tasks 23,30,45,53 --samples 2 --temperature 0.8 --k 1,2 --max-new-tokens 128
                --timeout 5 --workers 2
  robustness/:  quench robustness --tasks 23,45,53 --transforms tab_indent,VarRenamerNaive --seeds 2
                --max-new-tokens 128 --timeout 5 --workers 2   (without its report and plots)
They are never regenerated: a difference is a bug. A field quench does not know (written by another
version or tool) stays in its line.
"""

import json
import shutil
from pathlib import Path

import pytest

from quench.cli.main import main

FIXTURES = Path(__file__).parent / "fixtures" / "run_dirs"
RUN_ARGS = ["--tasks", "23,30,45,53", "--samples", "2", "--temperature", "0.8", "--k", "1,2",
            "--max-new-tokens", "128", "--timeout", "5", "--workers", "2"]
ROBUSTNESS_ARGS = ["--tasks", "23,45,53", "--transforms", "tab_indent,VarRenamerNaive", "--seeds", "2",
                   "--max-new-tokens", "128", "--timeout", "5", "--workers", "2"]
MACHINE = ("isolation",)  # how this machine confines programs: bwrap or rlimits, whoever wrote the fixture


def copy_run(name: str, tmp_path: Path) -> Path:
    out = tmp_path / name
    shutil.copytree(FIXTURES / name, out)
    return out


def add_unknown_field(path: Path, line: int) -> None:
    """A field of a later version (or of another tool) in one record."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    record = json.loads(lines[line])
    record["written_by_a_later_version"] = {"kept": [1, 2]}
    lines[line] = json.dumps(record) + "\n"
    path.write_text("".join(lines), encoding="utf-8")


def without(record: dict, keys) -> dict:
    return {key: value for key, value in record.items() if key not in keys}


def read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def test_a_finished_run_resumes_with_its_records_and_summary_unchanged(tmp_path, capsys):
    out = copy_run("run", tmp_path)
    add_unknown_field(out / "samples.jsonl", 2)
    add_unknown_field(out / "results.jsonl", 5)
    before = {name: (out / name).read_bytes() for name in ("samples.jsonl", "results.jsonl")}
    assert main(["run", *RUN_ARGS, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "4 problems, 8 samples: pass@1 62.5%" in printed and "pass@2 75.0%" in printed
    assert {name: (out / name).read_bytes() for name in before} == before  # nothing generated or run again
    expected = read_json(FIXTURES / "run" / "summary.json")
    assert without(read_json(out / "summary.json"), MACHINE) == without(expected, MACHINE)


def test_an_old_runs_samples_evaluate_into_the_same_results_and_summary(tmp_path, capsys):
    out = copy_run("run", tmp_path)
    (out / "summary.json").unlink()
    results = (out / "results.jsonl").read_bytes()
    assert main(["evaluate", str(out / "samples.jsonl"), "--k", "1,2", "--timeout", "5", "--workers", "2"]) == 0
    assert "outcomes: failed 3, passed 5" in capsys.readouterr().out
    assert (out / "results.jsonl").read_bytes() == results
    expected = read_json(FIXTURES / "run" / "summary.json")
    assert without(read_json(out / "summary.json"), MACHINE) == without(expected, MACHINE)


def test_an_old_run_compares_with_itself(tmp_path, capsys):
    out = copy_run("run", tmp_path)
    assert main(["compare", str(out), str(FIXTURES / "run")]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert [row[2:5] for row in rows] == [["Pass@1", "62.5", "62.5"], ["Pass@2", "75.0", "75.0"]]


@pytest.mark.slow
@pytest.mark.timeout(900)  # loads the model (prompt ids are hashes of the formatted prompts); generates nothing
def test_an_old_robustness_run_reports_the_same_metrics_from_its_records(tmp_path, capsys):
    out = copy_run("robustness", tmp_path)
    (out / "metrics.json").unlink()  # the report is written last: without it the run goes through every step
    add_unknown_field(out / "samples.jsonl", 1)
    add_unknown_field(out / "executions.jsonl", 0)
    before = {name: (out / name).read_bytes() for name in ("samples.jsonl", "executions.jsonl", "variants.jsonl")}
    assert main(["robustness", *ROBUSTNESS_ARGS, "--out", str(out)]) == 0
    capsys.readouterr()
    assert {name: (out / name).read_bytes() for name in before} == before
    for name in ("outcomes.json", "examples.jsonl"):
        assert (out / name).read_bytes() == (FIXTURES / "robustness" / name).read_bytes(), name
    metrics, expected = read_json(out / "metrics.json"), read_json(FIXTURES / "robustness" / "metrics.json")
    assert without(metrics, ("run_info",)) == without(expected, ("run_info",))
    timing = ("seconds", *MACHINE)  # wall time, summed over resumed runs
    assert metrics["run_info"]["weights"] == "dequantized"  # recorded since: what the old run ran
    assert metrics["run_info"]["kv_cache"] == "bfloat16"  # recorded since: its bfloat16 model's own caches
    assert metrics["run_info"]["loop_rule"] is None  # recorded since: the old run stopped no loop
    since = ("weights", "kv_cache", "loop_rule")
    assert without(metrics["run_info"], (*timing, *since)) == without(expected["run_info"], timing)


def test_an_old_robustness_runs_samples_evaluate_to_the_verdicts_it_recorded(tmp_path, capsys):
    """Each sample scored against its own variant's problem runs the program the robustness run ran."""
    run = copy_run("robustness", tmp_path)
    assert main(["evaluate", str(run / "samples.jsonl"), "--out", str(tmp_path / "out"), "--k", "1",
                 "--timeout", "5", "--workers", "2"]) == 0
    capsys.readouterr()
    executed = {row["program_id"]: row for row in map(json.loads, (run / "executions.jsonl").read_text().splitlines())}
    results = [json.loads(text) for text in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert len(results) == len((run / "samples.jsonl").read_text().splitlines())
    for result in results:
        assert (result["outcome"], result["passed"]) == (executed[result["program_id"]]["outcome"],
                                                         executed[result["program_id"]]["passed"]), result
