"""The engine flags reach one resolved EngineConfig."""

import pytest

from quench.cli.settings import engine_config_from_args
from quench.cli.main import SUBCOMMANDS
from quench.cli.parser import build_parser


@pytest.mark.parametrize("command", ["run", "generate", "robustness"])
def test_batch_invariant_flag_reaches_the_engine_config(command):
    parser = build_parser(SUBCOMMANDS)
    assert engine_config_from_args(parser.parse_args([command])).batch_invariant is None  # on wherever it serves
    assert engine_config_from_args(parser.parse_args([command, "--batch-invariant"])).batch_invariant is True
    assert engine_config_from_args(parser.parse_args([command, "--no-batch-invariant"])).batch_invariant is False


def test_draft_max_rows_flag_reaches_the_engine_config():
    args = build_parser(SUBCOMMANDS).parse_args(["run", "--speculate", "hybrid", "--draft-max-rows", "3"])
    config = engine_config_from_args(args)
    assert (config.drafter, config.draft_max_rows) == ("hybrid", 3)
