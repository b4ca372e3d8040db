"""`LocalEngines` (--engines N): several engine processes give the samples one engine gives, and fail clearly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import save_tiny_model
from quench.distributed import ModelSpec
from quench.distributed.local import LocalEngines, deal, hands_out_on_demand
from quench.engine.config import EngineConfig
from quench.engine.types import GenerationRequest, SamplingParams
from quench.errors import QuenchError
from quench.models import load_model
from quench.runs.backends import BackendOptions, make_backend

pytestmark = pytest.mark.timeout(600)
OPTIONS = BackendOptions(engine=EngineConfig(batch_size=2))  # blocks of two requests: both engines get work

PROMPTS = ["def add(a, b):\n", "def is_even(n):\n", "x = [1, 2", "# sort a list\n", "class A:\n", "def f():\n    return",
           "for i in range(", "import math\n"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("engines") / "tiny")


def requests(tokenizer, n: int = 1) -> list[GenerationRequest]:
    return [GenerationRequest(f"p{i}", tuple(tokenizer(text)["input_ids"]), n, ()) for i, text in enumerate(PROMPTS)]


def by_key(results) -> dict[tuple[str, int], tuple[int, ...]]:
    return {(r.key, r.sample_index): r.token_ids for r in results}


def test_deal_gives_blocks_of_neighbouring_requests_round_robin() -> None:
    items = [GenerationRequest(str(i), (1,), 1, ()) for i in range(7)]
    shares = deal(items, 2, 2)
    assert [[r.key for r in share] for share in shares] == [["0", "1", "4", "5"], ["2", "3", "6"]]
    assert [len(s) for s in deal(items, 3, 4)] == [4, 3, 0]


@pytest.fixture(scope="module")
def two_engines(tiny: Path):
    with LocalEngines(ModelSpec(str(tiny), "float32", backend=OPTIONS), engines=2) as engines:
        yield engines


@pytest.mark.parametrize("sampling", [SamplingParams(0.0, 1.0, 0, 12, 0), SamplingParams(0.9, 1.0, 0, 12, 3)],
                         ids=["greedy", "sampled"])
def test_two_engines_give_the_samples_of_one(tiny: Path, two_engines: LocalEngines, sampling: SamplingParams) -> None:
    loaded = load_model(str(tiny), "float32")
    one = by_key(make_backend(loaded, OPTIONS).generate(requests(loaded.tokenizer, 2), sampling))
    two = by_key(two_engines.generate(requests(loaded.tokenizer, 2), sampling))
    assert len(one) == 16 and two == one
    starts: list[tuple[str, int]] = []
    some = by_key(two_engines.generate(requests(loaded.tokenizer, 2)[:3], sampling,  # another call, other shares
                                       on_start=lambda key, sample: starts.append((key, sample))))
    assert some == {key: ids for key, ids in one.items() if key[0] in ("p0", "p1", "p2")}
    assert sorted(starts) == sorted(some)  # each sample said when it took a slot, once


def test_engines_on_batch_invariant_kernels_take_blocks_as_they_ask_and_the_rest_are_dealt(
        two_engines: LocalEngines) -> None:
    """Greedy rows, or sampled ones without drafts, on batch-invariant kernels do not depend on the rows beside them:
    blocks go to whichever engine runs out first. Sampled rows with drafts would: those are dealt before the start."""
    two_engines.wait_ready()
    assert all(two_engines._ready.values())  # the tiny model runs on batch-invariant kernels
    greedy, sampled = SamplingParams(0.0, 1.0, 0, 12, 0), SamplingParams(0.9, 1.0, 0, 12, 3)
    assert hands_out_on_demand(OPTIONS, [True, True], greedy) and hands_out_on_demand(OPTIONS, [True, True], sampled)
    drafting = BackendOptions(engine=EngineConfig(batch_size=2, drafter="ngram"))
    assert hands_out_on_demand(drafting, [True, True], greedy) and not hands_out_on_demand(drafting, [True, True], sampled)
    assert not hands_out_on_demand(OPTIONS, [True, False], greedy)


def test_a_call_left_half_read_leaves_no_engine_waiting_for_the_next(tiny: Path, two_engines: LocalEngines) -> None:
    """A caller that stops reading leaves engines that will ask for more work: the next call answers those asks
    with nothing, so they finish the old call's rows, and then runs in full."""
    loaded = load_model(str(tiny), "float32")
    sampling = SamplingParams(0.0, 1.0, 0, 12, 0)
    one = by_key(make_backend(loaded, OPTIONS).generate(requests(loaded.tokenizer, 2), sampling))
    first = two_engines.generate(requests(loaded.tokenizer, 2), sampling)
    next(first)
    first.close()
    assert by_key(two_engines.generate(requests(loaded.tokenizer, 2), sampling)) == one


def test_an_engine_that_dies_ends_the_run_with_a_clear_error(tiny: Path) -> None:
    loaded = load_model(str(tiny), "float32")
    with LocalEngines(ModelSpec(str(tiny), "float32", backend=OPTIONS), engines=2) as engines:
        engines.wait_ready()
        os.kill(engines._processes[1].pid, signal.SIGKILL)
        with pytest.raises(QuenchError, match="engine process 1 died"):
            list(engines.generate(requests(loaded.tokenizer), SamplingParams(0.0, 1.0, 0, 200, 0)))


def quench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "quench.cli.main", *args], capture_output=True, text=True, timeout=500)


def test_run_with_two_engines_writes_what_one_engine_writes(tiny: Path, tmp_path: Path) -> None:
    common = ["--threads", "2", "run", "--model", str(tiny), "--prompt-format", "completion", "--tasks", "0-3", "--max-new-tokens", "16",
              "--dtype", "float32", "--batch-size", "2", "--timeout", "5", "--workers", "1"]
    one, two = quench(*common, "--out", str(tmp_path / "one")), quench(*common, "--engines", "2", "--out", str(tmp_path / "two"))
    assert one.returncode == 0, one.stderr[-2000:]
    assert two.returncode == 0, two.stderr[-2000:]
    rows = lambda d: {(r["task_id"], r["raw"]) for r in map(json.loads, (tmp_path / d / "samples.jsonl").read_text().splitlines())}  # noqa: E731
    assert len(rows("two")) == 4 and rows("two") == rows("one")


@pytest.mark.parametrize("flags, message", [
    (["--engines", "0"], "--engines must be a positive number or auto, got '0'"),
    (["--engines", "two"], "--engines must be a positive number or auto, got 'two'"),
    (["--engines", "2", "--time-budget", "1", "--temperature", "0.8"], "--time-budget needs one engine"),
    # a CPU-only torch refuses --device cuda itself, first
    (["--engines", "2", "--device", "cuda"], "--engines applies on a CPU" if torch.version.cuda else "--device cuda: "),
    (["--engines", "2", "--ray", "auto"], "--engines and --ray: each Ray actor runs one engine"),
])
def test_bad_engine_counts_are_refused_before_anything_loads(tiny: Path, tmp_path: Path, flags: list[str], message: str) -> None:
    result = quench("run", "--model", str(tiny), "--tasks", "0", *flags, "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert f"error: {message}" in result.stderr
    assert not (tmp_path / "out").exists()
