"""benchmarks/llamacpp_agreement.py: its measures on literal token lists, and its refusals before anything loads."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SCRIPT = BENCHMARKS / "llamacpp_agreement.py"


@pytest.fixture(scope="module")
def script() -> ModuleType:
    sys.path.append(str(BENCHMARKS))  # its siblings (peer_backends, peer_client), after every library
    spec = importlib.util.spec_from_file_location("benchmarks_llamacpp_agreement", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)
    sys.path.remove(str(BENCHMARKS))


@pytest.mark.parametrize(("ours", "theirs", "prefix"), [
    ((1, 2, 3), (1, 2, 3), 3),
    ((1, 2, 3), (1, 9, 3), 1),  # a later agreement does not count
    ((7, 2), (1, 2), 0),
    ((1, 2), (1, 2, 3), 2),  # one ends early: the shorter length
    ((), (), 0),
])
def test_common_prefix(script, ours, theirs, prefix) -> None:
    assert script.common_prefix(ours, theirs) == prefix


def test_agreement_counts_identical_prompts_and_averages_the_prefixes(script) -> None:
    ours = [(1, 2, 3, 4), (5, 6, 7, 8), (9, 9, 9, 9)]
    theirs = [(1, 2, 3, 4), (5, 6, 0, 8), (0, 9, 9, 9)]
    result = script.agreement(ours, theirs)
    assert (result.prompts, result.identical, result.prefixes) == (3, 1, (4, 2, 0))
    assert result.mean_prefix == pytest.approx(2.0)
    assert result.identical_share == pytest.approx(1 / 3)


def test_agreement_refuses_lists_of_different_lengths(script) -> None:
    with pytest.raises(ValueError, match="2 sequences against 1"):
        script.agreement([(1,), (2,)], [(1,)])


def run_script(*flags: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("QUENCH_LLAMACPP_PYTHON", "QUENCH_LLAMA_BIN")}
    env["PYTHONPATH"] = str(BENCHMARKS.parent / "src")
    return subprocess.run([sys.executable, str(SCRIPT), *flags], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize(("flags", "message"), [
    ((), "error: --llamacpp-python: not given (nor $QUENCH_LLAMACPP_PYTHON): the llama_cpp environment's python"),
    (("--llamacpp-python", "/no/such/python"), "error: --llamacpp-python: /no/such/python is not an executable file"),
    (("--llamacpp-python", sys.executable, "--weights", "dequantized", "int9"),
     "error: --weights: unknown weights 'int9'"),
    (("--llamacpp-python", sys.executable, "--tokens", "0"), "error: --tokens: must be at least 1, got 0"),
])
def test_bad_input_is_one_error_line_and_exit_2(flags, message) -> None:
    done = run_script(*flags)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith(message)
    assert done.stdout == ""  # nothing loaded, nothing printed
