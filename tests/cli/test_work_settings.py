"""`auto` engines, batch size and speculation: chosen from the work and the machine, and never changing an answer."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from helpers import save_tiny_model
from quench.cli import work_settings
from quench.cli.settings import engine_config_from_args
from quench.cli.main import SUBCOMMANDS
from quench.cli.parser import build_parser
from quench.cli.work_settings import EngineChoice, Work, choose

GIB = 1 << 30
LARGE = Work(rows=11_537, greedy=True, backend="quench", device="cpu", threads=2, one_engine_only=False,
             draft_shipped=True, weight_bytes=GIB // 4, free_bytes=20 * GIB)


def test_a_large_greedy_run_gets_an_engine_per_thread_the_largest_batch_and_the_shipped_draft():
    assert choose(LARGE, "auto", "auto", "auto") == EngineChoice(2, 64, "hybrid")


@pytest.mark.parametrize("change, expected", [
    ({"greedy": False}, EngineChoice(2, 64, "none")),  # sampled: no speculation
    ({"draft_shipped": False}, EngineChoice(2, 64, "ngram")),
    ({"rows": 20}, EngineChoice(1, 32, "hybrid")),  # too few rows for a second model
    ({"rows": 3}, EngineChoice(1, 8, "hybrid")),
    ({"rows": 255}, EngineChoice(1, 64, "hybrid")),
    ({"rows": 256}, EngineChoice(2, 64, "hybrid")),
    ({"threads": 1}, EngineChoice(1, 64, "hybrid")),
    ({"device": "cuda"}, EngineChoice(1, 64, "hybrid")),
    ({"one_engine_only": True}, EngineChoice(1, 64, "hybrid")),
    ({"free_bytes": GIB}, EngineChoice(1, 64, "hybrid")),  # one model copy fits, not two
    ({"backend": "hf"}, EngineChoice(1, 64, "none")),
    ({"weights": "gguf-int8"}, EngineChoice(2, 64, "ngram")),  # steps too short for a draft model to pay
    ({"weights": "gguf"}, EngineChoice(2, 64, "hybrid")),
])
def test_each_choice_follows_the_work_and_the_machine(change, expected):
    assert choose(replace(LARGE, **change), "auto", "auto", "auto") == expected


def test_a_value_given_on_the_command_line_is_kept():
    assert choose(LARGE, "1", "8", "none") == EngineChoice(1, 8, "none")
    assert choose(LARGE, "1", "auto", "ngram") == EngineChoice(1, 64, "ngram")


@pytest.mark.parametrize("command", ["run", "generate", "robustness"])
def test_generation_commands_default_to_auto_and_check_it_at_the_engines_defaults(command):
    args = build_parser(SUBCOMMANDS).parse_args([command])
    assert (args.engines, args.batch_size, args.speculate) == ("auto", "auto", "auto")
    config = engine_config_from_args(args)
    assert (config.batch_size, config.drafter) == (8, "none")


def test_serve_keeps_its_batch_size_and_resolves_speculation_when_it_starts():
    args = build_parser(SUBCOMMANDS).parse_args(["serve"])
    assert isinstance(args.batch_size, int) and args.speculate == work_settings.AUTO  # tests/serve/test_cli.py


def quench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "quench.cli.main", *args], capture_output=True, text=True, timeout=500)


@pytest.mark.timeout(600)
def test_auto_settings_give_the_samples_of_one_plain_engine(tmp_path: Path):
    tiny = save_tiny_model(tmp_path / "tiny")
    common = ["--threads", "2", "generate", "--model", str(tiny), "--prompt-format", "completion", "--tasks", "0-127",
              "-n", "2", "--max-new-tokens", "24", "--dtype", "float32"]
    auto = quench(*common, "--out", str(tmp_path / "auto"))
    plain = quench(*common, "--engines", "1", "--batch-size", "4", "--speculate", "none", "--out", str(tmp_path / "plain"))
    assert auto.returncode == 0, auto.stderr[-2000:]
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert "engine: 2 engines, batch 64, speculate ngram (auto, for 256 samples)" in auto.stderr
    assert "(auto" not in plain.stderr
    rows = lambda d: {(r["task_id"], r["sample_index"], r["raw"])  # noqa: E731
                      for r in map(json.loads, (tmp_path / d / "samples.jsonl").read_text().splitlines())}
    assert len(rows("auto")) == 256 and rows("auto") == rows("plain")


def resolved(tmp_path: Path, *flags: str, recorded: dict | None = None):
    from quench.cli.settings import resolve_run_defaults

    if recorded is not None:
        (tmp_path / "config.json").write_text(json.dumps(recorded))
    args = build_parser(SUBCOMMANDS).parse_args(["run", *flags])
    resolve_run_defaults(args, tmp_path)
    return args


def stop_rule_for(tmp_path: Path, *flags: str, recorded: dict | None = None) -> str:
    return resolved(tmp_path, *flags, recorded=recorded).stop_rule


def test_the_auto_stop_rule_ends_greedy_loops_only(tmp_path: Path):
    assert stop_rule_for(tmp_path) == "loop"
    assert stop_rule_for(tmp_path, "--temperature", "0.8") == "none"
    assert stop_rule_for(tmp_path, "--stop-rule", "function") == "function"


def test_a_resumed_run_keeps_the_stop_rule_it_was_started_with(tmp_path: Path):
    assert stop_rule_for(tmp_path, recorded={"stop_rule": None}) == "none"  # runs made before the auto default
    assert stop_rule_for(tmp_path, recorded={"stop_rule": "function"}) == "function"
    assert stop_rule_for(tmp_path, "--overwrite", recorded={"stop_rule": None}) == "loop"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_engine_processes_run_the_weights_the_run_resolved(tmp_path: Path):
    """The default preset under --weights auto runs on its GGUF blocks (gguf-int8) in every engine process: two
    engines write one engine's samples."""
    common = ["--threads", "2", "generate", "--tasks", "0-7", "--max-new-tokens", "64", "--batch-size", "4",
              "--speculate", "none"]
    one = quench(*common, "--engines", "1", "--out", str(tmp_path / "one"))
    two = quench(*common, "--engines", "2", "--out", str(tmp_path / "two"))
    assert one.returncode == 0, one.stderr[-2000:]
    assert two.returncode == 0, two.stderr[-2000:]
    rows = lambda d: {(r["task_id"], r["raw"])  # noqa: E731
                      for r in map(json.loads, (tmp_path / d / "samples.jsonl").read_text().splitlines())}
    assert len(rows("two")) == 8 and rows("two") == rows("one")


def test_a_resumed_run_keeps_the_weights_it_was_started_with(tmp_path: Path):
    assert resolved(tmp_path).weights == "auto"  # a new run: the model's loader resolves it
    assert resolved(tmp_path, recorded={"stop_rule": None}).weights == "dequantized"  # recorded before the default
    assert resolved(tmp_path, recorded={"weights": "gguf-int8"}).weights == "gguf-int8"
    assert resolved(tmp_path, "--weights", "gguf", recorded={"weights": "gguf-int8"}).weights == "gguf"
