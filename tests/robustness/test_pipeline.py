"""The robustness pipeline end to end on a tiny real model saved as a Hugging Face directory."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import save_tiny_model

TRANSFORMS = "ButterFingersPerturbation,FuncRenameCamelCase,tab_indent,new_line_afterdoc"


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("tiny-model"))


def robustness(model_dir: Path, out: Path) -> subprocess.Popen:
    argv = [sys.executable, "-m", "quench.cli.main", "robustness", "--model", str(model_dir), "--tasks", "0-3",
            "--transforms", TRANSFORMS, "--seeds", "2", "--max-new-tokens", "24", "--batch-size", "2",
            "--timeout", "5", "--out", str(out)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def records(path: Path, key: str) -> list:
    return [json.loads(line)[key] for line in path.read_text().splitlines()] if path.exists() else []


def metrics(out: Path) -> dict:
    return json.loads((out / "metrics.json").read_text())["metrics"]


@pytest.mark.slow
def test_report_files_and_dedup(tiny_model_dir, tmp_path):
    run = robustness(tiny_model_dir, tmp_path / "run")
    output = run.communicate(timeout=600)[0].decode()
    assert run.returncode == 0, output[-3000:]
    out = tmp_path / "run"
    for name in ("metrics.json", "report.md", "report.html", "examples.jsonl", "variants.jsonl",
                 "categories_pass.png", "transformations_heatmap.png"):
        assert (out / name).is_file(), name
    variants = records(out / "variants.jsonl", "task_id")
    prompts = records(out / "samples.jsonl", "prompt_id")
    assert len(prompts) == len(set(prompts))  # each distinct prompt generated once
    # 4 tasks x (full + partial + variants); unchanged variants and deterministic seeds share prompts.
    assert len(prompts) < 4 * 2 + len(variants)
    programs = records(out / "executions.jsonl", "program_id")
    assert len(programs) == len(set(programs))
    names = {g["name"] for g in metrics(out)["transformations"]}
    assert names == set(TRANSFORMS.split(","))
    config = json.loads((out / "config.json").read_text())
    assert config["dtype"] in ("float32", "bfloat16")  # the dtype "auto" resolved to, as run_info shows
    run_info = json.loads((out / "metrics.json").read_text())["run_info"]
    assert run_info["dtype"] == config["dtype"] and run_info["seconds"] > 0
    outcomes = json.loads((out / "outcomes.json").read_text())
    assert sorted(outcomes["nominal_full"]) == [f"HumanEval/{i}" for i in range(4)]
    assert "nominal pass@1 (95% interval): full prompt" in output.lower()
    again = robustness(tiny_model_dir, out)  # everything is done: the rerun prints the figures, loading no model
    repeated = again.communicate(timeout=600)[0].decode()
    assert again.returncode == 0, repeated[-3000:]
    assert "the run is finished; its figures, without loading the model" in repeated
    assert f"loading {tiny_model_dir}" in output and f"loading {tiny_model_dir}" not in repeated
    table = [line for line in output.splitlines() if line.startswith(("nominal Pass@", "docstring", "category"))]
    assert table and all(line in repeated.splitlines() for line in table)
    # seconds add up over resumes: the nothing-to-do rerun reports the total, not its own ~0 s
    assert json.loads((out / "metrics.json").read_text())["run_info"]["seconds"] >= run_info["seconds"] > 0


@pytest.mark.slow
def test_sigkill_at_any_point_then_resume_gives_the_same_metrics(tiny_model_dir, tmp_path):
    whole = robustness(tiny_model_dir, tmp_path / "whole")
    assert whole.wait(timeout=600) == 0
    reference = metrics(tmp_path / "whole")

    out = tmp_path / "killed"
    for files_needed in (("variants.jsonl",), ("samples.jsonl",), ("executions.jsonl",)):
        run = robustness(tiny_model_dir, out)
        deadline = time.time() + 300
        while not all((out / f).exists() and (out / f).stat().st_size for f in files_needed) and run.poll() is None:
            assert time.time() < deadline
            time.sleep(0.05)
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
        run.wait()
    final = robustness(tiny_model_dir, out)
    assert final.wait(timeout=600) == 0, final.stdout.read().decode()[-3000:]
    assert metrics(out) == reference
    for name, key in (("samples.jsonl", "prompt_id"), ("executions.jsonl", "program_id")):
        keys = records(out / name, key)
        assert len(keys) == len(set(keys)) == len(records(tmp_path / "whole" / name, key))  # nothing twice, nothing lost


def test_elapsed_seconds_add_up_over_resumed_runs(tmp_path):
    from quench.robustness.pipeline import add_elapsed

    assert add_elapsed(tmp_path, 2.04) == 2.0
    assert add_elapsed(tmp_path, 1.5) == 3.5
    (tmp_path / "elapsed.json").write_text("{torn")
    assert add_elapsed(tmp_path, 1.0) == 1.0  # an unreadable total starts again rather than failing the run


def order_problems(count: int):
    from quench.datasets import Problem

    return [Problem(f"p{i}", f"def f{i}(x):\n    " + "y = x\n    " * (i % 4), "return x\n",
                    "def check(f):\n    assert f(1) == 1\n", f"f{i}") for i in range(count)]


def test_generation_order_is_a_seeded_shuffle_of_every_prompt():
    from quench.robustness.pipeline import generation_order

    prompts = order_problems(40)
    shuffled = generation_order(prompts, seed=0)
    assert sorted(p.task_id for p in shuffled) == sorted(p.task_id for p in prompts)  # a permutation
    assert shuffled == generation_order(prompts, seed=0)  # a resumed run: the same order
    assert shuffled != prompts and shuffled != generation_order(prompts, seed=1)
    assert generation_order(prompts, seed=None) == prompts


def test_generation_order_keeps_each_tasks_prompts_together_sorted_so_neighbours_share_beginnings():
    from quench.robustness.pipeline import generation_order

    prompts = order_problems(40)
    task_of = {p.task_id: f"task{int(p.task_id[1:]) % 5}" for p in prompts}  # 5 tasks of 8 prompts each
    ordered = generation_order(prompts, seed=3, task_of=task_of)
    assert sorted(p.task_id for p in ordered) == sorted(p.task_id for p in prompts)
    tasks = [task_of[p.task_id] for p in ordered]
    runs = [task for i, task in enumerate(tasks) if i == 0 or task != tasks[i - 1]]
    assert sorted(runs) == sorted(set(tasks))  # each task's prompts in one stretch
    for task in set(tasks):
        texts = [p.prompt for p in ordered if task_of[p.task_id] == task]
        assert texts == sorted(texts)  # neighbours share the longest beginnings
    orders = {tuple(runs)} | {tuple(dict.fromkeys(task_of[p.task_id] for p in generation_order(prompts, s, task_of)))
                               for s in range(1, 6)}
    assert len(orders) > 1  # the tasks' order follows the seed
    assert ordered == generation_order(list(reversed(prompts)), seed=3, task_of=task_of)  # whatever the built order


def test_the_generation_order_changes_no_greedy_output_under_batch_invariance_and_resumes(tmp_path):
    import torch

    from helpers import char_tokenizer, tiny_llama
    from quench.engine.kernels import invariant
    from quench.engine.config import EngineConfig
    from quench.engine.backend import QuenchBackend
    from quench.engine.types import SamplingParams
    from quench.robustness.pipeline import generation_order
    from quench.runs.samples import GenerateConfig, generate_samples

    if not invariant.available(torch.float32):
        pytest.skip("no native kernels built here")
    tokenizer = char_tokenizer()
    backend = QuenchBackend(tiny_llama(), tokenizer, EngineConfig(batch_size=3, batch_invariant=True))
    config = GenerateConfig(1, SamplingParams(max_new_tokens=10), prompt_format="base")

    def encode(text: str) -> tuple[int, ...]:
        return tuple(tokenizer(text, add_special_tokens=False)["input_ids"])

    prompts = order_problems(9)
    built = generate_samples(generation_order(prompts, None), backend, encode, config, tmp_path / "built.jsonl")
    half = tmp_path / "shuffled.jsonl"
    generate_samples(generation_order(prompts, 0)[:4], backend, encode, config, half)  # a run stopped part way
    shuffled = generate_samples(generation_order(prompts, 0), backend, encode, config, half)  # resumed
    keys = [r["task_id"] for r in records_of(half)]
    assert len(keys) == len(set(keys)) == 9  # nothing generated twice
    assert {r.task_id: r.raw for r in shuffled} == {r.task_id: r.raw for r in built}
    assert [r.task_id for r in shuffled] != [r.task_id for r in built]  # another batch composition


def records_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]
