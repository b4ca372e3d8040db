"""The engine's live queue (quench.engine.serving.live): continuous batching across requests, shared prefills,
sampling groups, speculation, GenGuard and failures, driven directly and through the HTTP API."""

from __future__ import annotations

import json
import threading

import httpx
import pytest
import torch
from torch import nn

from helpers import char_tokenizer, tiny_llama
from live_server import MODEL, serving, tiny_backend
from quench.engine.kernels import invariant
from quench.engine.config import EngineConfig
from quench.engine.backend import QuenchBackend
from quench.engine.serving.live import Failed, Finished, LiveEngine, LiveEvent, Tokens, settled_text, tokens_before
from quench.engine.types import GenerationRequest, SamplingParams
from quench.stopping import GenGuard, GuardInfo, GuardPolicy

GREEDY = SamplingParams(max_new_tokens=16)


class Recorder:
    """A sink per request; every event in arrival order, and a wait for one request's end."""

    def __init__(self) -> None:
        self.events: list[tuple[str, LiveEvent]] = []
        self.done: dict[str, threading.Event] = {}
        self.lock = threading.Lock()

    def sink(self, name: str, n: int = 1):
        self.done[name] = threading.Event()
        finished = [0]

        def receive(event: LiveEvent) -> None:
            with self.lock:
                self.events.append((name, event))
            finished[0] += isinstance(event, (Finished, Failed))
            if finished[0] >= n or isinstance(event, Failed):
                self.done[name].set()
        return receive

    def wait(self, name: str) -> None:
        assert self.done[name].wait(60), f"{name} did not finish"

    def results(self, name: str) -> list:
        return sorted((e.result for n, e in self.events if n == name and isinstance(e, Finished)),
                      key=lambda r: r.sample_index)

    def order(self) -> list[str]:
        return [name for name, event in self.events if isinstance(event, Finished)]


def request(backend, text: str, n: int = 1) -> GenerationRequest:
    return GenerationRequest(text, tuple(backend.tokenizer(text)["input_ids"]), n)


def test_a_request_joins_the_running_batch_at_the_next_step() -> None:
    backend = tiny_backend()
    engine = LiveEngine(backend, max_len=512).start()
    seen = Recorder()
    try:
        first_tokens = threading.Event()
        long_sink = seen.sink("long")
        engine.submit(request(backend, "x = [1, 2, 3]\nfor"), SamplingParams(max_new_tokens=400),
                      lambda event: (long_sink(event), isinstance(event, Tokens) and first_tokens.set()))
        assert first_tokens.wait(30)
        loop = engine.loop
        engine.submit(request(backend, "def f(x):"), GREEDY, seen.sink("short"))
        seen.wait("short")
        assert seen.order() == ["short"]  # the long one still decodes
        assert engine.loop is loop  # the short one joined its batch, not a batch of its own
        seen.wait("long")
    finally:
        engine.stop()
    [short] = seen.results("short")
    [expected] = tiny_backend().generate([request(backend, "def f(x):")], GREEDY)
    assert short.token_ids == expected.token_ids


def test_n_samples_of_a_request_share_one_prefill() -> None:
    backend = tiny_backend()
    engine = LiveEngine(backend, max_len=512).start()
    seen = Recorder()
    try:
        prompt = request(backend, "def add(a, b):\n", n=4)
        engine.submit(prompt, SamplingParams(temperature=1.0, max_new_tokens=8), seen.sink("four", n=4))
        seen.wait("four")
    finally:
        engine.stop()
    assert [r.sample_index for r in seen.results("four")] == [0, 1, 2, 3]
    assert engine.loop.stats.prefill_tokens == len(prompt.prompt_ids)


MIXED = {  # three settings that take three sampling paths: argmax, the C kernel, PyTorch's top-k / top-p
    "greedy": SamplingParams(max_new_tokens=24),
    "hot": SamplingParams(temperature=1.3, max_new_tokens=24),
    "nucleus": SamplingParams(temperature=0.8, top_p=0.9, top_k=12, max_new_tokens=24),
}


def served_alone_and_together(backend_of, prompts: dict[str, str], n: int = 2) -> tuple[dict, dict, LiveEngine]:
    """Each request's samples served on an engine of its own, and all of them submitted together."""
    alone = {}
    for name, text in prompts.items():
        backend = backend_of()
        engine = LiveEngine(backend, max_len=512).start()
        seen = Recorder()
        try:
            engine.submit(GenerationRequest(f"seed:{name}", request(backend, text).prompt_ids, n), MIXED[name],
                          seen.sink(name, n))
            seen.wait(name)
        finally:
            engine.stop()
        alone[name] = [r.token_ids for r in seen.results(name)]
    backend = backend_of()
    engine = LiveEngine(backend, max_len=512)
    seen = Recorder()
    for name, text in prompts.items():  # submitted before the thread starts: the first step holds them all
        engine.submit(GenerationRequest(f"seed:{name}", request(backend, text).prompt_ids, n), MIXED[name],
                      seen.sink(name, n))
    engine.start()
    try:
        for name in prompts:
            seen.wait(name)
    finally:
        engine.stop()
    return alone, {name: [r.token_ids for r in seen.results(name)] for name in prompts}, engine


@pytest.mark.skipif(not invariant.available(torch.float32), reason="no native kernels built here")
def test_rows_with_different_sampling_settings_share_a_batch_and_draw_what_they_draw_alone() -> None:
    prompts = {"greedy": "def f(x):", "hot": "import os", "nucleus": "x = [1, 2, 3]\nfor"}
    alone, together, engine = served_alone_and_together(
        lambda: tiny_backend(EngineConfig(batch_size=8, batch_invariant=True)), prompts)
    assert together == alone
    assert engine.loop.stats.mixed_steps > 0  # the rows did share steps
    assert alone["hot"][0] != alone["hot"][1]  # the samples are sampled, not all alike


def test_the_loop_ends_each_request_with_its_last_sample_after_its_sink_has_it() -> None:
    backend = tiny_backend()
    engine = LiveEngine(backend, max_len=512)
    seen = Recorder()
    held_at_finish: list[int] = []  # what the queue held as each sample reached its sink

    def noting_the_queue(sink):
        def receive(event: LiveEvent) -> None:
            if isinstance(event, Finished):
                held_at_finish.append(engine.queue.held())
            sink(event)
        return receive

    for name, n, logprobs in (("a", 3, None), ("b", 2, 2)):
        engine.submit(request(backend, f"{name} = 1", n), SamplingParams(temperature=0.9, max_new_tokens=6 + n),
                      noting_the_queue(seen.sink(name, n)), logprobs)
    loop = engine._loop()  # in this thread, to its end
    results = list(loop.run())
    assert sorted((r.key, r.sample_index) for r in results) == [("a = 1", 0), ("a = 1", 1), ("a = 1", 2),
                                                                ("b = 1", 0), ("b = 1", 1)]
    assert [len(seen.results(name)) for name in "ab"] == [3, 2]
    assert min(held_at_finish) >= 1  # a request's sink has its last sample before the loop ends the request
    assert engine.queue.held() == 0 and not loop.settings and not loop.scored  # then it is gone


def test_a_small_request_is_not_starved_by_the_samples_of_a_large_one() -> None:
    backend = tiny_backend()  # 4 slots; the large request wants 8 rows of 400 tokens
    engine = LiveEngine(backend, max_len=512).start()
    seen = Recorder()
    try:
        first_tokens = threading.Event()
        large_sink = seen.sink("large", n=8)
        engine.submit(request(backend, "x = [1, 2, 3]\nfor", n=8), SamplingParams(max_new_tokens=400),
                      lambda event: (large_sink(event), isinstance(event, Tokens) and first_tokens.set()))
        assert first_tokens.wait(30)
        engine.submit(request(backend, "def f(x):"), SamplingParams(max_new_tokens=8), seen.sink("small"))
        seen.wait("small")
        assert seen.order() == ["small"]  # no sample of the large request finished meanwhile
        engine.cancel(0)
    finally:
        engine.stop()


def test_speculative_serving_gives_the_regular_greedy_tokens() -> None:
    prompts = ["def add(a, b):\n    return a + b\n\ndef sub(a, b):\n", "x = 1\ny = 2\nx = 1\n"]
    reference = tiny_backend()
    expected = {r.key: r.token_ids for r in reference.generate([request(reference, p) for p in prompts], GREEDY)}
    backend = tiny_backend(EngineConfig(batch_size=4, drafter="ngram", draft_length="bass"))  # drafts whatever the timings
    engine = LiveEngine(backend, max_len=512).start()
    seen = Recorder()
    try:
        for p in prompts:
            engine.submit(request(backend, p), GREEDY, seen.sink(p))
        for p in prompts:
            seen.wait(p)
    finally:
        engine.stop()
    assert {p: seen.results(p)[0].token_ids for p in prompts} == expected
    assert engine.loop.stats.drafted > 0


def test_a_failing_step_fails_its_requests_and_the_engine_serves_the_next() -> None:
    backend = tiny_backend()
    greedy_tokens = backend.runner.greedy_tokens
    broken = threading.Event()
    broken.set()

    def fail_once(*args, **kwargs):
        if broken.is_set():
            broken.clear()
            raise RuntimeError("out of memory")
        return greedy_tokens(*args, **kwargs)

    backend.runner.greedy_tokens = fail_once
    engine = LiveEngine(backend, max_len=512).start()
    seen = Recorder()
    try:
        engine.submit(request(backend, "def f(x):"), GREEDY, seen.sink("first"))
        seen.wait("first")
        engine.submit(request(backend, "def f(x):"), GREEDY, seen.sink("second"))
        seen.wait("second")
    finally:
        engine.stop()
    assert [type(e) for n, e in seen.events if n == "first" and not isinstance(e, Tokens)] == [Failed]
    assert "out of memory" in next(e.message for n, e in seen.events if isinstance(e, Failed))
    assert len(seen.results("second")) == 1


def always_stop_guard() -> GenGuard:
    head = nn.Sequential(nn.Linear(32, 2))
    with torch.no_grad():
        head[0].weight.zero_()
        head[0].bias.copy_(torch.tensor([0.0, 10.0]))
    return GenGuard(head, GuardPolicy(mode="consecutive", consecutive=3), GuardInfo(32))


def test_genguard_stops_are_reported_with_finish_reason_guard() -> None:
    backend = tiny_backend()
    backend.guard = always_stop_guard()
    with serving(backend) as served:
        for stream in (False, True):
            body = {"model": MODEL, "prompt": "def f(x):", "max_tokens": 16, "temperature": 0, "stream": stream}
            response = httpx.post(f"{served.url}/completions", json=body, timeout=60)
            assert response.status_code == 200
            if stream:
                assert '"finish_reason": "guard"' in response.text
            else:
                assert response.json()["choices"][0]["finish_reason"] == "guard"


@pytest.mark.parametrize("text, settled", [
    ("def f():\n    return 1\n    x", "def f():\n    return 1\n"),
    ("a = 1\n\n   \nfoo", "a = 1\n"),
    ("a\n\n", "a\n"),
    ("a\nb\n", "a\nb\n"),
    ("no newline yet", ""),
    ("", ""),
])
def test_guarded_rows_publish_only_what_genguard_cannot_take_back(text: str, settled: str) -> None:
    assert settled_text(text) == len(settled)


def test_tokens_before_counts_tokens_that_end_inside_the_text() -> None:
    assert tokens_before(["ab", "c\nd", "e"], 3) == 1
    assert tokens_before(["ab", "c\nd", "e"], 5) == 2
    assert tokens_before(["ab"], 0) == 0


def test_a_guarded_stream_adds_up_to_the_guarded_answer() -> None:
    tokenizer = char_tokenizer()
    model = tiny_llama(max_positions=1024)
    with torch.no_grad():  # newlines now and then, so that lines end and GenGuard's line vote decides
        model.lm_head.weight[tokenizer.convert_tokens_to_ids("\n")] *= 3
    torch.manual_seed(0)
    guard = GenGuard(nn.Sequential(nn.Linear(32, 2)), GuardPolicy(mode="lines", max_empty_lines=1), GuardInfo(32))
    backend = QuenchBackend(model, tokenizer, EngineConfig(batch_size=4), guard=guard)
    chunks = 0
    with serving(backend) as served:
        for prompt in ["class Stack:\n    def", "x = [1, 2, 3]\nfor", "import os\nprint("]:
            body = {"model": MODEL, "prompt": prompt, "max_tokens": 300, "temperature": 0}
            whole = httpx.post(f"{served.url}/completions", json=body, timeout=60).json()["choices"][0]
            streamed = httpx.post(f"{served.url}/completions", json={**body, "stream": True}, timeout=60).text
            parts = [json.loads(line[6:])["choices"][0] for line in streamed.splitlines() if line.startswith("data: {")]
            assert "".join(p["text"] for p in parts) == whole["text"]
            assert parts[-1]["finish_reason"] == whole["finish_reason"]
            chunks += len(parts)
    assert chunks > 20  # text went out line by line, not only at the end


def test_ignore_eos_runs_a_request_to_max_tokens_beside_one_that_stops_at_eos() -> None:
    """vLLM's `ignore_eos` (its serving benchmark sends it): per request, in one batch."""
    backend = tiny_backend()
    prompt = "def add(a, b):\n"
    [alone] = backend.generate([request(backend, prompt)], SamplingParams(max_new_tokens=12))
    eos = alone.token_ids[3]
    backend.eos_ids = frozenset({eos})  # greedy reaches this EOS after `before` tokens
    before = alone.token_ids.index(eos)
    with serving(backend) as served:
        def complete(**extra) -> dict:
            body = {"model": MODEL, "prompt": prompt, "max_tokens": 12, "temperature": 0, **extra}
            response = httpx.post(f"{served.url}/completions", json=body, timeout=60)
            assert response.status_code == 200, response.text
            return response.json()

        stops, runs = complete(), complete(ignore_eos=True)
    assert stops["choices"][0]["finish_reason"] == "stop" and stops["usage"]["completion_tokens"] == before
    assert runs["choices"][0]["finish_reason"] == "length" and runs["usage"]["completion_tokens"] == 12
