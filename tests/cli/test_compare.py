"""`quench compare` on real run directories written in the formats `quench run` and `quench robustness` write."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from quench.cli.main import main
from quench.robustness import RobustnessRun, VariantOutcomes, robustness_metrics, write_report
from quench.robustness.compare import McNemar, compare_runs, load_run, mcnemar, verdict
from quench.stats.intervals import BootstrapConfig, Interval

TASKS = [f"HumanEval/{i}" for i in range(60)]


def outcomes(passing: set[int], tasks=TASKS) -> dict[str, tuple[bool, ...]]:
    return {t: (i in passing,) for i, t in enumerate(tasks)}


def robustness_dir(path: Path, nominal: set[int], perturbed: set[int], tasks=TASKS, seeds=(0,), ks=(1,)) -> Path:
    """A `quench robustness` run directory: config.json, metrics.json, outcomes.json and the report."""
    run = RobustnessRun(
        nominal_full=outcomes(nominal, tasks),
        nominal_partial=outcomes(nominal, tasks),
        variants=tuple(VariantOutcomes("ButterFingersPerturbation", "docstring", s, outcomes(perturbed, tasks))
                       for s in seeds)
        + (VariantOutcomes("new_lines", "code_format", 0, outcomes(nominal, tasks)),),
    )
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model": "tiny", "tasks": list(tasks), "n": 1}))
    write_report(path, robustness_metrics(run, ks, BootstrapConfig(resamples=200)), [], {"model": "tiny"}, run=run)
    return path


def run_dir(path: Path, passing: set[int], tasks=TASKS, k: str = "pass@1") -> Path:
    """A `quench run` directory: config.json, samples.jsonl, results.jsonl, summary.json."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model": "tiny", "tasks": list(tasks), "n": 1}))
    with (path / "samples.jsonl").open("w") as f:
        for t in tasks:
            f.write(json.dumps({"task_id": t, "sample_index": 0, "completion": "    pass\n"}) + "\n")
    with (path / "results.jsonl").open("w") as f:
        for i, t in enumerate(tasks):
            passed = i in passing
            f.write(json.dumps({"task_id": t, "sample_index": 0, "outcome": "passed" if passed else "failed",
                                "passed": passed, "detail": "", "seconds": 0.01}) + "\n")
    summary = {"num_problems": len(tasks), "num_samples": len(tasks),
               "pass_at_k": {k: len(passing) / len(tasks)}, "outcomes": {}}
    (path / "summary.json").write_text(json.dumps(summary))
    return path


def rows_by_name(rows):
    return {(r.group, r.metric): r for r in rows}


def test_mcnemar_exact_p_values():
    assert mcnemar(np.array([0] * 5), np.array([1] * 5)) == McNemar(0, 5, 0.0625)  # 2 / 2^5
    assert mcnemar(np.array([1] + [0] * 9), np.array([0] + [1] * 9)).p_value == pytest.approx(2 * 11 / 1024)
    assert mcnemar(np.array([1, 0]), np.array([1, 0])) == McNemar(0, 0, 1.0)


def test_b_better_and_worse_rows(tmp_path):
    # A: 15 of 60 pass nominally, 10 survive the docstring variant. B: 40 pass, 38 survive.
    a = robustness_dir(tmp_path / "a", set(range(15)), set(range(10)))
    b = robustness_dir(tmp_path / "b", set(range(40)), set(range(38)))
    rows = rows_by_name(compare_runs(load_run(a), load_run(b)))
    full = rows[("nominal (full prompt)", "Pass@1")]
    assert (full.a, full.b) == (pytest.approx(15 / 60), pytest.approx(40 / 60))
    assert full.mcnemar == McNemar(0, 25, pytest.approx(2 / 2 ** 25))
    assert full.difference.low > 0.25 and full.verdict == "B better"
    assert rows[("docstring", "RP@1")].verdict == "B better"
    # RD: A (15 − 10)/15 = 33%, B (40 − 38)/40 = 5%: B's drop is lower, which is better.
    drop = rows[("docstring", "RD@1")]
    assert drop.difference.point == pytest.approx(0.05 - 1 / 3) and drop.verdict == "B better"
    # RR: A 5 changed, B 2 changed, out of 60: too few to tell.
    assert rows[("docstring", "RR@1")].verdict == "no detectable difference"
    reverse = rows_by_name(compare_runs(load_run(b), load_run(a)))
    assert reverse[("docstring", "RP@1")].verdict == "B worse"


def test_identical_runs_show_no_difference(tmp_path):
    a = robustness_dir(tmp_path / "a", set(range(30)), set(range(20)))
    b = robustness_dir(tmp_path / "b", set(range(30)), set(range(20)))
    for row in compare_runs(load_run(a), load_run(b)):
        assert row.verdict == "no detectable difference"
        # no problem differs, so every resample gives 0; the bound is the exact one for 0 differing
        # problems of those the figure rests on, not a certain [0, 0]
        difference = row.difference
        assert difference.point == 0.0 and difference.method == "exact" and -0.2 < difference.low == -difference.high < 0


def test_mcnemar_vetoes_an_interval_that_rests_on_a_few_problems():
    # 4 of 100 problems pass only in B: every resample's difference is ≥ 0 (interval excludes 0 on
    # most seeds), but 4 discordant pairs cannot be told from chance: p = 2/16.
    interval = Interval(0.04, 0.01, 0.08, 100)
    assert verdict(interval, True, McNemar(0, 4, 0.125)) == "no detectable difference"
    assert verdict(interval, True, None) == "B better"
    assert verdict(interval, False, None) == "B worse"
    assert verdict(Interval(0.5, None, None, 100, "too few nominal passes"), False, None) == "too few nominal passes"


def test_cli_writes_table_report_and_json(tmp_path, capsys):
    a = run_dir(tmp_path / "a", set(range(10)))
    b = run_dir(tmp_path / "b", set(range(35)))
    out = tmp_path / "cmp"
    assert main(["compare", str(a), str(b), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "all problems" in printed and "B better" in printed
    assert {p.name for p in out.iterdir()} == {"compare.md", "compare.html", "compare.json", "compare.png"}
    markdown = (out / "compare.md").read_text()
    assert "| all problems | Pass@1 | 16.7 | 58.3 | +41.7 [" in markdown and "*B − A for each row" in markdown
    assert main(["compare", str(a), str(b), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    (row,) = data["rows"]
    assert row["verdict"] == "B better" and row["mcnemar"] == {"a_only": 0, "b_only": 25, "p_value": pytest.approx(2 / 2 ** 25)}
    assert row["difference"]["problems"] == 60


REFUSALS = [
    # (what B differs in, how to build B, words the error must contain)
    ("problems", lambda p: robustness_dir(p, set(range(15)), set(range(10)), tasks=TASKS[:50]), "different full-prompt problems"),
    ("variants", lambda p: robustness_dir(p, set(range(15)), set(range(10)), seeds=(0, 1)), "different variants"),
    ("kind", lambda p: run_dir(p, set(range(15))), "`quench robustness` directory"),
    ("not a run", lambda p: p.mkdir() or p, "not a run directory"),
    ("missing", lambda p: p, "no such run directory"),
]


@pytest.mark.parametrize("case", REFUSALS, ids=lambda r: r[0])
def test_refuses_runs_that_cannot_be_compared(tmp_path, capsys, case):
    _, build, words = case
    a = robustness_dir(tmp_path / "a", set(range(15)), set(range(10)))
    b = tmp_path / "b"
    build(b)
    before = sorted((p.relative_to(tmp_path), p.read_bytes()) for p in tmp_path.rglob("*") if p.is_file())
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "cmp")]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("error: ") and words in error, error
    after = sorted((p.relative_to(tmp_path), p.read_bytes()) for p in tmp_path.rglob("*") if p.is_file())
    assert after == before and not (tmp_path / "cmp").exists()  # nothing written, nothing changed


def test_refuses_runs_with_different_k(tmp_path, capsys):
    a = run_dir(tmp_path / "a", set(range(10)))
    b = run_dir(tmp_path / "b", set(range(10)), k="pass@10")
    assert main(["compare", str(a), str(b)]) == 2
    assert capsys.readouterr().err.strip() == "error: the runs report different k: 1 in A, 10 in B"


def test_refuses_variants_valid_for_other_problems(tmp_path, capsys):
    a = robustness_dir(tmp_path / "a", set(range(15)), set(range(10)))
    b = robustness_dir(tmp_path / "b", set(range(15)), set(range(10)))
    data = json.loads((b / "outcomes.json").read_text())
    del data["variants"][0]["outcomes"]["HumanEval/7"]
    (b / "outcomes.json").write_text(json.dumps(data))
    assert main(["compare", str(a), str(b)]) == 2
    error = capsys.readouterr().err.strip()
    assert "ButterFingersPerturbation seed 0 is valid for different problems" in error and "HumanEval/7" in error


def test_console_command_exits_2_with_one_error_line(tmp_path):
    a = run_dir(tmp_path / "a", set(range(10)))
    b = run_dir(tmp_path / "b", set(range(10)), tasks=TASKS[1:])
    done = subprocess.run([sys.executable, "-m", "quench.cli.main", "compare", str(a), str(b)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "error: the runs are over different full-prompt problems: 1 only in A (HumanEval/0)")
