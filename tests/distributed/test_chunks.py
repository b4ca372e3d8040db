"""Cutting work into chunks for Ray actors (no Ray needed)."""

import pytest

from helpers import char_tokenizer, tiny_llama
from quench.distributed.chunks import PLACEHOLDER, balanced_size, batched, generation_chunks, layout, split_request
from quench.distributed.config import ModelSpec, RayOptions
from quench.engine.backend import QuenchBackend
from quench.engine.config import EngineConfig
from quench.engine.types import GenerationRequest, SamplingParams


def req(key: str, n: int, offset: int = 0) -> GenerationRequest:
    return GenerationRequest(key, (5, 6, 7), n, (), offset)


def test_batched_keeps_order_and_the_short_tail() -> None:
    assert list(batched(range(7), 3)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(batched([], 3)) == []
    with pytest.raises(ValueError):
        list(batched([1], 0))


def test_balanced_size_gives_every_worker_work() -> None:
    assert balanced_size(10, workers=2, preferred=16) == 3  # 4 chunks for 2 workers x 2 in flight
    assert balanced_size(1000, workers=2, preferred=16) == 16
    assert balanced_size(0, workers=2, preferred=16) == 16
    assert balanced_size(1, workers=8, preferred=16) == 1


def test_split_request_keeps_sample_indices() -> None:
    parts = list(split_request(req("a", 5, offset=2), 2))
    assert [(p.sample_offset, p.n) for p in parts] == [(2, 2), (4, 2), (6, 1)]
    assert all(p.key == "a" and p.prompt_ids == (5, 6, 7) for p in parts)


def test_generation_chunks_pack_and_split_without_losing_a_sample() -> None:
    requests = [req("a", 1), req("b", 5), req("c", 2), req("d", 1)]
    chunks = list(generation_chunks(requests, 3))
    assert [[(i, r.key, r.sample_offset, r.n) for i, r in chunk] for chunk in chunks] == [
        [(0, "a", 0, 1)],
        [(1, "b", 0, 3)],
        [(1, "b", 3, 2)],
        [(2, "c", 0, 2), (3, "d", 0, 1)],
    ]
    samples = sorted((r.key, s) for chunk in chunks for _, r in chunk for s in range(r.sample_offset, r.sample_offset + r.n))
    assert samples == sorted((r.key, s) for r in requests for s in range(r.n))
    assert all(sum(r.n for _, r in chunk) <= 3 for chunk in chunks)


def test_layout_puts_each_request_at_its_old_index() -> None:
    a, c = req("a", 1), req("c", 2)
    assert layout([(0, a), (2, c)]) == [a, PLACEHOLDER, c]
    assert layout([]) == []
    with pytest.raises(ValueError):
        layout([(1, a), (1, c)])


def test_a_chunk_samples_what_the_whole_list_samples() -> None:
    """The engine seeds rows by (seed, request index, sample index): layout keeps both, so chunks agree."""
    tokenizer = char_tokenizer()
    engine = QuenchBackend(tiny_llama(), tokenizer, EngineConfig(batch_size=3))
    requests = [GenerationRequest(f"T/{i}", tuple(tokenizer(f"def f{i}(x):")["input_ids"]), 2) for i in range(4)]
    sampling = SamplingParams(temperature=0.9, max_new_tokens=12, seed=7)
    whole = {(r.key, r.sample_index): r.token_ids for r in engine.generate(requests, sampling)}
    pieces = {}
    for chunk in generation_chunks(requests, 3):
        pieces.update({(r.key, r.sample_index): r.token_ids for r in engine.generate(layout(chunk), sampling)})
    assert pieces == whole


def test_config_validation_and_portable_paths(tmp_path, monkeypatch) -> None:
    with pytest.raises(ValueError):
        RayOptions(num_actors=0)
    with pytest.raises(ValueError):
        RayOptions(poll_s=0)
    (tmp_path / "model").mkdir()
    monkeypatch.chdir(tmp_path)
    assert ModelSpec("model").portable().name == str(tmp_path / "model")
    assert ModelSpec("smollm2-135m-instruct").portable().name == "smollm2-135m-instruct"
