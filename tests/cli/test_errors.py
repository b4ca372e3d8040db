import json

import pytest

from quench.cli.main import main


@pytest.mark.parametrize("argv,message", [
    (["run", "--model", "no-such-model"], "unknown model 'no-such-model'"),
    (["run", "--tasks", "999"], "unknown task id(s): HumanEval/999"),
    (["run", "--benchmark", "mbpp", "--split", "dev"], "unknown MBPP split 'dev'"),
    (["run", "--samples", "0"], "--samples must be at least 1"),
    (["run", "--top-p", "0"], "top_p must be in (0, 1]"),
    (["evaluate", "missing.jsonl"], "missing.jsonl: no such samples file"),
    (["robustness", "--seeds", "0"], "--seeds must be at least 1, got 0"),
    (["robustness", "--transforms", "Nope"], "unknown perturbation 'Nope'"),
    (["robustness", "--categories", "nope"], "unknown category 'nope'"),
    (["robustness", "--k", "1,5", "-n", "2"], "pass@5 needs at least 5 samples per prompt, got -n 2"),
    (["run", "--backend", "hf", "--speculate", "ngram"], "--speculate ngram needs --backend quench"),
    (["run", "--speculate", "hybrid", "--draft-confidence", "1.5"], "--draft-confidence must be in [0, 1), got 1.5"),
    (["run", "--speculate", "hybrid", "--draft-stop", "-0.1"], "--draft-stop must be in [0, 1), got -0.1"),
    (["run", "--speculate", "hybrid", "--draft-max-rows", "-1"], "--draft-max-rows must be >= 0 (0: never pause), got -1"),
    (["run", "--guard", "missing-guard.safetensors"], "missing-guard.safetensors"),
    (["--threads", "0", "perturb", "--list"], "--threads must be at least 1, got 0"),
])
def test_bad_input_exits_2_naming_it(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_malformed_samples_line_is_named(capsys, tmp_path):
    path = tmp_path / "samples.jsonl"
    path.write_text(json.dumps({"task_id": "HumanEval/0", "completion": "    return 1\n"}) + "\n{oops\n")
    assert main(["evaluate", str(path)]) == 2
    assert f"{path}:2: not valid JSON" in capsys.readouterr().err


def test_unknown_task_in_samples_is_named(capsys, tmp_path):
    path = tmp_path / "samples.jsonl"
    path.write_text(json.dumps({"task_id": "HumanEval/500", "completion": "    return 1\n"}) + "\n")
    assert main(["evaluate", str(path)]) == 2
    assert "unknown task id(s) for this benchmark: HumanEval/500" in capsys.readouterr().err


def test_threads_sets_torch_threads(capsys):
    import torch

    before = torch.get_num_threads()
    try:
        assert main(["--threads", "1", "perturb", "--list"]) == 0
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
