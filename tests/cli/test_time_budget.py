import json

import pytest

from helpers import save_tiny_model
from quench.cli.main import main


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny"))


def test_budget_keeps_sampling_and_reports_pass_first_and_all(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["run", "--model", str(tiny_model_dir), "--backend", "quench", "--time-budget", "0.3",
            "--temperature", "1", "--tasks", "0-1", "--max-new-tokens", "6", "--batch-size", "4", "--out", str(out)]
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert {"pass@first", "pass@all"} <= summary.keys() and summary["mean_samples"] > 4  # more than one batch
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    for task in ("HumanEval/0", "HumanEval/1"):
        finish = [r["finish_s"] for r in rows if r["task_id"] == task]
        assert finish == sorted(finish) and max(finish) <= 0.3 + 0.5
        assert [r["sample_index"] for r in rows if r["task_id"] == task] == list(range(len(finish)))
    assert main(argv) == 0  # a second run finds every problem done and samples nothing more
    assert len((out / "samples.jsonl").read_text().splitlines()) == len(rows)


@pytest.mark.parametrize("extra,message", [
    (["--temperature", "0"], "needs --temperature > 0"),
    (["--temperature", "1", "--backend", "hf"], "needs --backend quench"),
    (["--temperature", "1", "--time-budget", "-1"], "must be positive"),
])
def test_budget_rejects_settings_it_cannot_honour(extra, message, capsys, tmp_path):
    assert main(["run", "--time-budget", "5", "--backend", "quench", *extra, "--out", str(tmp_path / "x")]) == 2
    assert message in capsys.readouterr().err
