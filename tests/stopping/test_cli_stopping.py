"""`--stop-rule function` and `--guard PATH` through `quench generate`/`run` (scripted model, no downloads)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from quench.cli import console
from quench.cli.main import main
from quench.models.loading import LoadedModel
from quench.stopping import GenGuard, GuardInfo, GuardPolicy
from stopping.scripted import Script
from stopping.test_rule_engine import COMPLETION, ENTRY, EXPECTED

SCRIPT = Script(list(COMPLETION.values()))


@pytest.fixture()
def bench(tmp_path: Path, monkeypatch) -> Path:
    loaded = LoadedModel(SCRIPT.model, SCRIPT.tokenizer, "scripted", "completion", torch.float32, "")
    monkeypatch.setattr(console, "load_model", lambda *args, **kwargs: loaded)  # what generate and run load
    path = tmp_path / "bench.jsonl"
    path.write_text("".join(json.dumps({"task_id": k, "prompt": chain[0], "canonical_solution": "", "test": "",
                                        "entry_point": ENTRY[k]}) + "\n" for k, chain in COMPLETION.items()))
    return path


def generate(bench: Path, out: Path, *flags: str) -> int:
    # --stop "": no stop sequences, so only the rule under test ends the answers.
    return main(["generate", "--benchmark", str(bench), "--max-new-tokens", "12", "--batch-size", "2",
                 "--stop", "", "--out", str(out), *flags])


def samples(out: Path) -> dict[str, dict]:
    return {r["task_id"]: r for r in map(json.loads, (out / "samples.jsonl").read_text().splitlines())}


@pytest.mark.parametrize("backend", ["quench", "hf"])
def test_function_rule_from_the_cli(bench: Path, tmp_path: Path, backend: str) -> None:
    assert generate(bench, tmp_path / "full", "--backend", backend, "--stop-rule", "none") == 0
    assert generate(bench, tmp_path / "rule", "--backend", backend, "--stop-rule", "function") == 0
    full, rule = samples(tmp_path / "full"), samples(tmp_path / "rule")
    for key in COMPLETION:
        if key in EXPECTED:
            assert rule[key]["raw"] == EXPECTED[key] and rule[key]["finish_reason"] == "hook"
            assert (rule[key]["num_tokens"] < full[key]["num_tokens"]) == (backend == "quench")
        else:
            assert rule[key]["raw"] == full[key]["raw"]
    config = json.loads((tmp_path / "rule" / "config.json").read_text())
    assert config["stop_rule"] == "function" and config["guard"] is None


def test_resume_with_other_stopping_is_refused(bench: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    assert generate(bench, out, "--backend", "quench", "--stop-rule", "function") == 0
    assert generate(bench, out, "--backend", "quench", "--stop-rule", "none") == 2
    assert "stop_rule" in capsys.readouterr().err
    assert generate(bench, out, "--backend", "quench") == 0  # --stop-rule auto resumes with the recorded rule
    guard = tmp_path / "g.safetensors"
    GenGuard(nn.Sequential(nn.Linear(SCRIPT.model.config.hidden_size, 2)), GuardPolicy(), GuardInfo(SCRIPT.model.config.hidden_size)).save(guard)
    assert generate(bench, out, "--backend", "quench", "--stop-rule", "function", "--guard", str(guard)) == 2
    assert "guard" in capsys.readouterr().err
    assert generate(bench, out, "--backend", "quench", "--stop-rule", "function") == 0  # same settings resume


def test_guard_from_the_cli(bench: Path, tmp_path: Path) -> None:
    """A guard voting "stop" on every token (3 in a row) stops every answer before its first token."""
    size = SCRIPT.model.config.hidden_size
    head = nn.Sequential(nn.Linear(size, 2))
    with torch.no_grad():
        head[0].weight.zero_()
        head[0].bias.copy_(torch.tensor([0.0, 10.0]))
    path = tmp_path / "always.safetensors"
    GenGuard(head, GuardPolicy(mode="consecutive"), GuardInfo(size)).save(path)
    assert generate(bench, tmp_path / "g", "--backend", "quench", "--guard", str(path)) == 0
    assert all(r["finish_reason"] == "guard" and r["num_tokens"] == 0 for r in samples(tmp_path / "g").values())
    assert json.loads((tmp_path / "g" / "config.json").read_text())["guard"] == str(path)


def test_guard_needs_the_quench_backend_and_the_rule_no_time_budget(bench: Path, tmp_path: Path, capsys) -> None:
    assert generate(bench, tmp_path / "x", "--backend", "hf", "--guard", "auto") == 2
    assert "--guard needs --backend quench" in capsys.readouterr().err
    argv = ["run", "--benchmark", str(bench), "--backend", "quench", "--temperature", "0.5", "--time-budget", "1",
            "--stop-rule", "function", "--out", str(tmp_path / "b")]
    assert main(argv) == 2
    assert "--stop-rule function does not apply with --time-budget" in capsys.readouterr().err
