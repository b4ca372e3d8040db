"""`quench robustness` and `quench perturb` with `--benchmark mbpp+` end to end: both verdicts per program,
both test sets' metrics, variant files that keep their MBPP+ tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import save_tiny_model
from quench.cli.main import main
from quench.datasets import load_benchmark
from quench.perturbations.release import read_recode
from quench.robustness.pipeline import RobustnessConfig, partial_baselines, variants_from_release

TRANSFORMS = ("FuncRenameCamelCase", "tab_indent")  # a function-name and a code-format transformation
TASKS = ("Mbpp/11", "Mbpp/12")  # the first two of the test split


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory):
    """One oracle cache for the module: the expected outputs are computed once, not per test."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("QUENCH_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield


def lines(path: Path) -> list[dict]:
    return [json.loads(row) for row in path.read_text().splitlines()]


@pytest.mark.slow  # a model, generation and a sandbox: seconds on a quiet machine, minutes on a loaded one
def test_robustness_reports_base_and_plus_metrics(cache, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = save_tiny_model(tmp_path / "tiny")
    out = tmp_path / "run"
    assert main(["--threads", "1", "robustness", "--model", str(model), "--benchmark", "mbpp+", "--limit", "2",
                 "--transforms", ",".join(TRANSFORMS), "--seeds", "1", "--max-new-tokens", "4", "--batch-size", "1",
                 "--workers", "1", "--out", str(out)]) == 0
    assert "MBPP+: base inputs and base + extra inputs (95% intervals):" in capsys.readouterr().out
    base, plus = (json.loads((out / name).read_text()) for name in ("metrics.json", "metrics_plus.json"))
    base = base["metrics"]
    for metrics in (base, plus):
        assert {g["name"] for g in metrics["transformations"]} == set(TRANSFORMS)
        assert metrics["nominal_problems"]["full"] == 2
    table = (out / "plus.md").read_text()
    assert "| group | Pass@1 base | Pass@1 plus |" in table
    assert all(f"| {name} | " in table for name in TRANSFORMS)
    assert "% [" in table.split("| group |")[1]  # every figure with its interval
    assert "## MBPP+: base inputs and base + extra inputs (k=1)" in (out / "report.md").read_text()
    assert "<h2>MBPP+: base inputs and base + extra inputs (k=1)</h2>" in (out / "report.html").read_text()
    executions = lines(out / "executions.jsonl")
    assert executions and all({"passed", "outcome", "passed_plus", "outcome_plus"} <= set(r) for r in executions)
    assert all(r["passed"] or not r["passed_plus"] for r in executions)  # plus includes base
    samples = lines(out / "samples.jsonl")
    assert {s["task_id"] for s in samples} == set(TASKS)
    assert {"nominal/full", "nominal/partial"} <= {s["variant"] for s in samples}
    assert {r["benchmark"] for r in lines(out / "variants.jsonl")} == {"mbpp+"}


def perturb(out: Path) -> int:
    return main(["perturb", "--benchmark", "mbpp+", "--limit", "2", "--transforms", ",".join(TRANSFORMS),
                 "--seeds", "1", "--workers", "1", "--out", str(out)])


@pytest.mark.slow  # a sandbox runs every reference and variant on its extra inputs
def test_perturb_writes_variants_that_keep_their_plus_tests(cache, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "perturbed"
    assert perturb(out) == 0
    assert "wrote 2 variant files" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == [
        "mbpp+_FuncRenameCamelCase_s0.jsonl", "mbpp+_partial.jsonl", "mbpp+_tab_indent_s0.jsonl", "summary.json"]
    summary = json.loads((out / "summary.json").read_text())
    for name in TRANSFORMS:  # each perturbed reference passed the base and extra inputs
        assert summary["transformations"][name]["share_valid"] == 1.0, summary["transformations"][name]
    assert summary["validated"] and not summary["rejected"] and not summary["refused"]
    variants = read_recode(out)
    assert {v.task_id for v in variants} == set(TASKS)
    assert {v.benchmark for v in variants} == {"mbpp+"}  # read back, they still run the plus tests
    problems = load_benchmark("mbpp+", None, None, 2)
    nominal = {p.task_id: p.entry_point for p in problems}
    renamed = [v for v in variants if v.meta("perturbation") == "FuncRenameCamelCase"]
    assert all(f"def {v.entry_point}(" in v.prompt for v in renamed)  # the harness calls the new name
    assert any(v.entry_point != nominal[v.task_id] for v in renamed)
    # the nominal partial file is the code variants' baseline under --nominal-partial: it runs the plus tests too
    config = RobustnessConfig(TRANSFORMS, seeds=1, nominal_partial=out / "mbpp+_partial.jsonl")
    baselines = partial_baselines(problems, config)
    assert {b.benchmark for b in baselines.values()} == {"mbpp+"}
    assert all(b.prompt_kind == "partial" for b in baselines.values())


def test_released_variants_and_baselines_run_the_plus_tests(tmp_path: Path) -> None:
    """Files named after MBPP, or whose rows name no benchmark, still run the selected MBPP+ tasks' extra inputs."""
    problems = load_benchmark("mbpp+", None, None, 2)
    rows = [{"task_id": p.task_id, "prompt": p.prompt.replace("    ", "\t"), "entry_point": p.entry_point,
             "canonical_solution": p.canonical_solution, "test": p.test} for p in problems]
    release = tmp_path / "release"
    release.mkdir()
    for name in ("mbpp_tab_indent_s0.jsonl", "mbpp_partial.jsonl"):
        (release / name).write_text("".join(json.dumps(row) + "\n" for row in rows))
    variants = variants_from_release(release, problems)
    assert {v.benchmark for group in variants.values() for v in group} == {"mbpp+"}
    baselines = partial_baselines(problems, RobustnessConfig(("tab_indent",), perturbed_dir=release))
    assert {b.benchmark for b in baselines.values()} == {"mbpp+"}
