"""Each default is defined once, in the library's config; the flags show the same value."""

from __future__ import annotations

import pytest

from quench.cli.main import SUBCOMMANDS
from quench.cli.parser import build_parser
from quench.engine.config import EngineConfig
from quench.engine.drafters import NgramDrafter
from quench.engine.types import SamplingParams
from quench.execution import SandboxLimits
from quench.runs.eta import ExecutePace


@pytest.mark.parametrize("command", ["run", "generate", "robustness"])
def test_the_sampling_flags_default_to_sampling_params(command):
    args = build_parser(SUBCOMMANDS).parse_args([command])
    sampling = SamplingParams()
    assert (args.temperature, args.top_p, args.top_k, args.max_new_tokens, args.seed) == (
        sampling.temperature, sampling.top_p, sampling.top_k, sampling.max_new_tokens, sampling.seed)


@pytest.mark.parametrize("command", ["run", "evaluate", "robustness", "perturb"])
def test_every_timeout_flag_and_the_eta_default_to_the_sandbox_limit(command):
    argv = [command, "samples.jsonl"] if command == "evaluate" else [command]
    assert build_parser(SUBCOMMANDS).parse_args(argv).timeout == SandboxLimits().timeout_s == ExecutePace().timeout_s


def test_prompt_lookup_defaults_to_the_engine_config():
    drafter, config = NgramDrafter(1), EngineConfig()
    assert (drafter.max_n, drafter.min_n) == (config.ngram_max, config.ngram_min)
