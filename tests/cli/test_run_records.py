"""What a run directory records: the dtype the model loaded as, how its programs ran; older directories resume."""

import json
import os
import subprocess
import sys

import pytest

from helpers import save_tiny_model
from quench.cli.main import main
from quench.execution import choose_isolation
from quench.models.loading import resolve_dtype


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny"))


def run_argv(model, out) -> list[str]:
    return ["--threads", "1", "run", "--model", str(model), "--tasks", "0", "--max-new-tokens", "4",
            "--batch-size", "1", "--workers", "1", "--out", str(out)]


def read(path) -> dict:
    return json.loads(path.read_text())


def test_run_records_the_dtype_used_and_the_isolation(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(run_argv(tiny_model_dir, out)) == 0
    config = read(out / "config.json")
    assert config["dtype"] == "auto"
    assert config["dtype_used"] == str(resolve_dtype("auto", "cpu")).removeprefix("torch.")
    assert config["dtype_used"] in ("bfloat16", "float32")
    summary = read(out / "summary.json")
    assert (summary["isolation"], summary["unsafe_unconfined"]) == (choose_isolation(), False)
    assert summary["num_samples"] == 1

    evaluated = tmp_path / "evaluated"
    assert main(["evaluate", str(out / "samples.jsonl"), "--workers", "1", "--out", str(evaluated)]) == 0
    again = read(evaluated / "summary.json")
    assert (again["isolation"], again["unsafe_unconfined"]) == (choose_isolation(), False)
    assert again["pass_at_k"] == summary["pass_at_k"]


def test_an_older_run_directory_resumes_and_another_dtype_does_not(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(run_argv(tiny_model_dir, out)) == 0
    config = read(out / "config.json")
    older = {k: v for k, v in config.items() if k != "dtype_used"}  # written before dtype_used was recorded
    (out / "config.json").write_text(json.dumps(older, indent=2, sort_keys=True) + "\n")
    (out / "samples.jsonl").write_text("")  # unfinished: the model loads to generate the rest
    assert main(run_argv(tiny_model_dir, out)) == 0
    assert read(out / "config.json") == config  # resumed, and now says what it used

    other = "float32" if config["dtype_used"] == "bfloat16" else "bfloat16"
    (out / "config.json").write_text(json.dumps({**config, "dtype_used": other}) + "\n")
    (out / "samples.jsonl").write_text("")
    capsys.readouterr()
    assert main(run_argv(tiny_model_dir, out)) == 2
    assert "holds a run with other settings (dtype_used)" in capsys.readouterr().err


def test_an_unconfined_evaluation_says_so_in_summary_json(tmp_path):
    """From an interpreter nobody can read, on a PATH without bubblewrap: only --unsafe-unconfined runs it."""
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o700)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(locked / "venv")], check=True, timeout=120)
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    env = {**os.environ, "PATH": str(empty), "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps({"task_id": "HumanEval/0", "completion": "    return False\n"}) + "\n")
    out = tmp_path / "out"
    done = subprocess.run([str(locked / "venv" / "bin" / "python"), "-m", "quench.cli.main", "evaluate", str(samples),
                           "--workers", "1", "--unsafe-unconfined", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "note: programs run UNCONFINED" in done.stderr
    summary = read(out / "summary.json")
    assert (summary["isolation"], summary["unsafe_unconfined"]) == ("unconfined", True)


def test_a_gguf_run_records_its_kv_caches_and_an_older_one_resumes_with_float32_caches(tmp_path, capsys):
    """The default preset on its GGUF blocks records bfloat16 KV caches (`--kv-cache auto`); a run directory written
    before they were the default (no kv_cache in config.json, float32 caches) resumes with float32 caches and says
    so, and asking it for bfloat16 caches is refused before anything is generated."""
    out = tmp_path / "run"
    argv = ["--threads", "1", "run", "--tasks", "0", "--max-new-tokens", "4", "--batch-size", "1", "--workers", "1",
            "--out", str(out)]
    assert main(argv) == 0
    config = read(out / "config.json")
    assert (config["weights"], config["kv_cache"]) == ("gguf-int8", "bfloat16")
    older = {k: v for k, v in config.items() if k != "kv_cache"}
    (out / "config.json").write_text(json.dumps(older, indent=2, sort_keys=True) + "\n")
    (out / "samples.jsonl").write_text("")
    assert main(argv) == 0
    assert read(out / "config.json") == {**config, "kv_cache": "float32"}
    (out / "config.json").write_text(json.dumps(older, indent=2, sort_keys=True) + "\n")
    (out / "samples.jsonl").write_text("")
    capsys.readouterr()
    assert main([*argv, "--kv-cache", "bfloat16"]) == 2
    assert "holds a run with other settings (kv_cache)" in capsys.readouterr().err


def test_a_greedy_run_records_its_loop_rule_and_an_older_one_resumes_with_the_exact_rule(tiny_model_dir, tmp_path):
    """Greedy runs stop loops (`--stop-rule auto`) and record the rule's definition; a run directory written before
    the rule had its numbers part (stop_rule loop, no loop_rule), or before its exact part left the prompt's text
    alone (no exempt_spans), resumes with the rule it ran."""
    from quench.stopping.loop_rule import EXACT_LOOP_RULE, LOOP_RULE, UNEXEMPT_LOOP_RULE

    out = tmp_path / "run"
    assert main(run_argv(tiny_model_dir, out)) == 0
    config = read(out / "config.json")
    assert (config["stop_rule"], config["loop_rule"]) == ("loop", LOOP_RULE.settings())
    older = {k: v for k, v in config.items() if k != "loop_rule"}
    (out / "config.json").write_text(json.dumps(older, indent=2, sort_keys=True) + "\n")
    (out / "samples.jsonl").write_text("")
    assert main(run_argv(tiny_model_dir, out)) == 0
    assert read(out / "config.json") == {**config, "loop_rule": EXACT_LOOP_RULE.settings()}
    blind = {k: v for k, v in UNEXEMPT_LOOP_RULE.settings().items() if k != "exempt_spans"}
    (out / "config.json").write_text(json.dumps({**config, "loop_rule": blind}, indent=2, sort_keys=True) + "\n")
    (out / "samples.jsonl").write_text("")
    assert main(run_argv(tiny_model_dir, out)) == 0  # recorded before `exempt_spans`: it ran without it
    assert read(out / "config.json") == {**config, "loop_rule": UNEXEMPT_LOOP_RULE.settings()}
    sampled = tmp_path / "sampled"
    assert main([*run_argv(tiny_model_dir, sampled), "--temperature", "0.8"]) == 0
    assert (read(sampled / "config.json")["stop_rule"], read(sampled / "config.json")["loop_rule"]) == (None, None)
