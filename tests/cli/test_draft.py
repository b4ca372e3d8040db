"""`quench draft train`'s flags reach DistillConfig, and bad values are clear errors before any model loads."""

from __future__ import annotations

import argparse

import pytest

from quench.cli import draft as cli
from quench.cli.main import main
from quench.errors import QuenchError
from quench.training.distill import DistillConfig


def parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    return parser.parse_args(["draft", "train", *argv])


def test_no_flags_give_the_shipped_recipe():
    assert cli.config_from_args(parsed()) == DistillConfig()


def test_stdlib_prompts_reach_the_config():
    config = cli.config_from_args(parsed("--stdlib-prompts", "37", "--stdlib", "12"))
    assert config.stdlib_prompts == 37 and config.stdlib_functions == 12


def test_a_negative_count_is_a_clear_error(capsys, tmp_path, monkeypatch):
    with pytest.raises(QuenchError, match="stdlib_prompts"):
        cli.config_from_args(parsed("--stdlib-prompts", "-1"))
    monkeypatch.chdir(tmp_path)
    assert main(["draft", "train", "--stdlib-prompts", "-1"]) == 2
    assert "stdlib_prompts must be >= 0" in capsys.readouterr().err
