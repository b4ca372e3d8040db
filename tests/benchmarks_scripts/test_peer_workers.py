"""The peer workers of benchmarks/generation.py run for real on the default preset's GGUF, where their environments are
given ($QUENCH_OPENVINO_PYTHON, $QUENCH_LLAMACPP_PYTHON, $QUENCH_LLAMA_BIN for a libllama.so built apart); skipped
otherwise (CI installs no peer). What the benchmark leans on: a batch's rows are what each prompt gives alone, the
samples that share a prompt's keys/values are what a fresh prompt gives, and a seed gives the same samples."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from quench.engine.types import GenerationRequest, SamplingParams
from quench.models.presets import DEFAULT_PRESET, PRESETS, preset_gguf_parts

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
pytestmark = pytest.mark.slow
# two chat-template prompts of different lengths (SmolLM2's ids): padding and ragged rows
LONG = (1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3459, 28, 7018, 411, 42, 7, 102, 2, 198, 1, 4093, 198,
        19161, 103, 2, 198, 1, 520, 9531, 198)
SHORT = LONG[:20]
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=12, ignore_eos=True)
SAMPLED = SamplingParams(temperature=0.8, max_new_tokens=12, ignore_eos=True, seed=3)


@pytest.fixture(scope="module")
def peers():
    sys.path.append(str(BENCHMARKS))
    import peer_backends

    yield peer_backends
    sys.path.remove(str(BENCHMARKS))


def setup_or_skip(peers, variable: str):
    python = os.environ.get(variable)
    if not python:
        pytest.skip(f"${variable} is not set: no such peer here")
    gguf = preset_gguf_parts(PRESETS[DEFAULT_PRESET])[0]
    bin_dir = os.environ.get(peers.LLAMA_BIN_ENV)
    return peers.PeerSetup(gguf, openvino_python=Path(python), llamacpp_python=Path(python),
                           llama_bin=Path(bin_dir) if bin_dir else None)


def tokens(backend, requests, sampling) -> list[list[tuple[int, ...]]]:
    results = backend.generate(requests, sampling)
    return [[r.token_ids for r in results if r.key == request.key] for request in requests]


def test_openvino_gives_each_row_of_a_padded_batch_what_it_gives_alone(peers) -> None:
    backend = peers.openvino_backend(setup_or_skip(peers, peers.OPENVINO_ENV), batch_size=2, threads=1)
    try:
        together = tokens(backend, [GenerationRequest("long", LONG), GenerationRequest("short", SHORT)], GREEDY)
        alone = [tokens(backend, [GenerationRequest(key, ids)], GREEDY)[0] for key, ids in (("long", LONG), ("short", SHORT))]
        assert together == alone
        assert [len(row[0]) for row in together] == [12, 12]  # EOS ignored
        first = tokens(backend, [GenerationRequest("long", LONG, n=3)], SAMPLED)
        assert len(first[0]) == 3 and len(set(first[0])) > 1  # three samples, not one thrice
        assert tokens(backend, [GenerationRequest("long", LONG, n=3)], SAMPLED) == first  # seeded
    finally:
        backend.close()


def test_llamacpp_samples_that_share_a_prompt_are_what_a_fresh_prompt_gives(peers) -> None:
    backend = peers.llamacpp_backend(setup_or_skip(peers, peers.LLAMACPP_ENV), threads=1)
    try:
        [shared] = tokens(backend, [GenerationRequest("long", LONG, n=3)], GREEDY)
        [fresh] = tokens(backend, [GenerationRequest("long", LONG)], GREEDY)
        assert shared == fresh * 3  # the 2nd and 3rd reuse the prompt's keys/values
        assert len(fresh[0]) == 12
        first = tokens(backend, [GenerationRequest("short", SHORT, n=3)], SAMPLED)
        assert len(set(first[0])) > 1
        assert tokens(backend, [GenerationRequest("short", SHORT, n=3)], SAMPLED) == first  # seeded
        assert backend.last_times.seconds > 0
    finally:
        backend.close()
