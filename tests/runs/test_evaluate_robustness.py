"""The samples a robustness run writes can be evaluated again, with the same outcome per program."""

from __future__ import annotations

import json

import pytest

from helpers import char_tokenizer, tiny_llama
from quench.cli.main import main
from quench.datasets import load_humaneval
from quench.engine import SamplingParams
from quench.engine.hf_backend import HFBackend
from quench.execution import SandboxLimits, SandboxPool
from quench.execution.program_build import program_for
from quench.robustness.pipeline import RobustnessConfig, build_units, digest, read_variants, run_robustness
from quench.runs.calibration import TimeLimitRule

TRANSFORMS = ("FuncRenameCamelCase", "tab_indent")


def lines(path):
    return [json.loads(row) for row in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("robustness")
    tokenizer = char_tokenizer()
    encode = lambda text: tuple(tokenizer(text[-60:], add_special_tokens=False)["input_ids"])  # noqa: E731
    config = RobustnessConfig(TRANSFORMS, seeds=1, sampling=SamplingParams(max_new_tokens=12), prompt_format="completion",
                              time_limits=TimeLimitRule(5.0))
    backend = HFBackend(tiny_llama(), tokenizer, batch_size=4)
    with SandboxPool(1, SandboxLimits(timeout_s=5)) as pool:
        outcome = run_robustness(load_humaneval()[:2], config, backend, encode, lambda t: t, pool, out)
    return out, config, backend, encode, outcome


def test_samples_keep_the_task_id_and_name_their_variant(run_dir):
    out, *_ = run_dir
    rows = lines(out / "samples.jsonl")
    assert {r["task_id"] for r in rows} == {"HumanEval/0", "HumanEval/1"}
    assert {"nominal/full", "nominal/partial"} <= {r["variant"] for r in rows}
    assert len({r["prompt_id"] for r in rows}) == len(rows)  # each distinct prompt generated once


def test_one_limit_per_task_is_recorded_for_all_its_variants(run_dir):
    out, *_ = run_dir
    calibration = json.loads((out / "config.json").read_text())["calibration"]
    assert set(calibration["timeouts"]) == {"HumanEval/0", "HumanEval/1"}
    assert calibration["base_s"] == 5.0 and all(limit >= 5.0 for limit in calibration["timeouts"].values())


def test_evaluate_scores_each_sample_as_the_robustness_run_did(run_dir, tmp_path):
    out = run_dir[0]
    assert main(["evaluate", str(out / "samples.jsonl"), "--out", str(tmp_path), "--workers", "1", "--k", "1"]) == 0
    executed = {r["program_id"]: r for r in lines(out / "executions.jsonl")}
    units = build_units(load_humaneval()[:2], read_variants(out / "variants.jsonl"), lambda t: t)
    problem_of = {}
    for unit in units:
        problem_of.setdefault(unit.prompt_id, unit.problem)
    samples = {(r["task_id"], r["variant"], r["sample_index"]): r for r in lines(out / "samples.jsonl")}
    evaluated = lines(tmp_path / "results.jsonl")
    assert len(evaluated) == len(samples)
    for result in evaluated:
        sample = samples[(result["task_id"], result["variant"], result["sample_index"])]
        program = program_for(problem_of[sample["prompt_id"]], sample["completion"], sample["solution"])
        expected = executed[digest(program)]
        assert (result["outcome"], result["detail"]) == (expected["outcome"], expected["detail"])


def test_a_run_written_before_variant_labels_resumes_without_generating_again(run_dir, tmp_path):
    out, config, backend, encode, outcome = run_dir
    old = tmp_path / "old"
    old.mkdir()
    for name in ("variants.jsonl", "executions.jsonl"):
        (old / name).write_bytes((out / name).read_bytes())
    unlabelled = [{**{k: v for k, v in r.items() if k not in ("variant", "prompt_id")}, "task_id": r["prompt_id"]}
                  for r in lines(out / "samples.jsonl")]
    (old / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in unlabelled))
    before = (old / "samples.jsonl").read_bytes()
    with SandboxPool(1, SandboxLimits(timeout_s=5)) as pool:
        again = run_robustness(load_humaneval()[:2], config, backend, encode, lambda t: t, pool, old)
    assert (old / "samples.jsonl").read_bytes() == before
    assert again.metrics == outcome.metrics
