"""Chunked prefill in the live loop (quench.engine.serving.live): a prompt longer than the prefill budget is fed a chunk
per step while the running rows decode, and gives the tokens of a whole prefill."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import httpx

import pytest
import torch
from torch import nn

from helpers import tiny_llama
from live_server import MODEL, serving, tiny_backend
from quench.engine.kernels import invariant
from quench.engine.config import EngineConfig
from quench.engine.backend import QuenchBackend
from quench.engine.serving.live import Finished, LiveEngine, LiveEvent, LiveLoop, Tokens
from quench.engine.types import GenerationRequest, SamplingParams
from quench.stopping import GenGuard, GuardInfo, GuardPolicy

needs_invariant = pytest.mark.skipif(not invariant.available(torch.float32), reason="no native kernels built here")

BUDGET = 16
GREEDY = SamplingParams(max_new_tokens=24)
SHORT = "def f(x):"
LONG = "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n        self."
assert len(LONG) > 5 * BUDGET  # the char tokenizer: one token per character


def request(backend: QuenchBackend, name: str, text: str, n: int = 1) -> GenerationRequest:
    return GenerationRequest(f"seed:{name}", tuple(backend.tokenizer(text)["input_ids"]), n)


class StepLog:
    """A loop listener: after each admission, each running request's tokens and the prompts under way."""

    def __init__(self, loop: LiveLoop, after_step: Callable[[int], None] = lambda step: None) -> None:
        self.loop = loop
        self.after_step = after_step
        self.generated: list[dict[int, int]] = []  # per step: request index -> its first row's tokens
        self.prefilling: list[set[int]] = []  # per step: requests whose prompt is being prefilled

    def on_token(self, slot, row, token) -> None:
        pass

    def on_commit(self, slots) -> None:
        generated: dict[int, int] = {}
        for row in slots:
            if row is not None:
                generated.setdefault(row.request_index, len(row.generated))
        self.generated.append(generated)
        self.prefilling.append(set(self.loop.prefilling))
        self.after_step(len(self.generated))

    def on_finish(self, slot, row, result) -> None:
        pass


def record_feeds(backend: QuenchBackend) -> list[int]:
    """The width of every prompt feed (a forward with `logits_at`) the backend's target runs from now on."""
    feeds: list[int] = []
    forward = backend.runner.forward

    def recorded(cache, tokens, start, **kwargs):
        if kwargs.get("logits_at") is not None:
            feeds.append(tokens.shape[1])
        return forward(cache, tokens, start, **kwargs)

    backend.runner.forward = recorded
    return feeds


def collect(events: dict[str, list[LiveEvent]], name: str) -> Callable[[LiveEvent], None]:
    events[name] = []
    return events[name].append


def finished(events: list[LiveEvent]) -> list[tuple]:
    done = sorted((e for e in events if isinstance(e, Finished)), key=lambda e: e.result.sample_index)
    return [(e.result.token_ids, e.result.finish_reason, e.logprobs) for e in done]


def seeded_guard() -> GenGuard:
    """A guard whose votes stop the short request after a few tokens and let the long one run."""
    torch.manual_seed(0)
    return GenGuard(nn.Sequential(nn.Linear(32, 2)), GuardPolicy(mode="consecutive", consecutive=4), GuardInfo(32))


CASES = {  # name -> (engine config, sampling, a guard)
    "greedy": (EngineConfig(batch_size=4), SamplingParams(max_new_tokens=24), False),
    "sampled": (EngineConfig(batch_size=4), SamplingParams(temperature=0.9, top_p=0.95, max_new_tokens=24), False),
    # BASS's length drafts whatever the step timings say (the measured one may find drafts do not pay)
    "ngram": (EngineConfig(batch_size=4, drafter="ngram", draft_length="bass"), SamplingParams(max_new_tokens=24), False),
    "draft-sampled": (EngineConfig(batch_size=4, drafter="draft", draft_length="fixed", draft_tokens=3),
                      SamplingParams(temperature=0.9, max_new_tokens=24), False),
    "guard": (EngineConfig(batch_size=4), SamplingParams(max_new_tokens=24), True),
}


def serve_short_and_long(case: str, budget: int) -> tuple[dict[str, list[tuple]], list[int], LiveLoop]:
    """A short request and a long one (2 samples, log-probabilities) in one loop under `budget`."""
    config, sampling, guarded = CASES[case]
    draft_model = tiny_llama(seed=1, max_positions=1024) if config.drafter == "draft" else None
    backend = tiny_backend(config) if draft_model is None else QuenchBackend(
        tiny_llama(max_positions=1024), tiny_backend().tokenizer, config, draft_model=draft_model)
    if guarded:
        backend.guard = seeded_guard()
    engine = LiveEngine(backend, max_len=512, prefill_budget=budget)
    events: dict[str, list[LiveEvent]] = {}
    engine.submit(request(backend, "short", SHORT), sampling, collect(events, "short"))
    engine.submit(request(backend, "long", LONG, n=2), sampling, collect(events, "long"), top_logprobs=2)
    feeds = record_feeds(backend)
    loop = engine._loop()
    for _ in loop.run():
        pass
    return {name: finished(got) for name, got in events.items()}, feeds, loop


@needs_invariant
@pytest.mark.parametrize("case", list(CASES))
def test_a_prompt_prefilled_in_chunks_gives_the_tokens_of_a_whole_prefill(case: str) -> None:
    chunked, feeds, loop = serve_short_and_long(case, BUDGET)
    whole, whole_feeds, _ = serve_short_and_long(case, 4096)
    assert chunked == whole
    assert len(chunked["long"]) == 2 and all(logprobs for _, _, logprobs in chunked["long"])
    assert max(feeds) <= BUDGET < max(whole_feeds)  # the long prompt did go in chunks
    assert loop.stats.prefill_tokens == len(SHORT) + len(LONG)  # its two samples share one prefill
    if case == "sampled":
        assert chunked["long"][0][0] != chunked["long"][1][0]
    if case.startswith(("ngram", "draft")):
        assert loop.stats.drafted > 0
    if case == "guard":
        assert chunked["short"][0][1] == "guard"


@needs_invariant
def test_running_rows_decode_every_step_while_a_long_prompt_is_prefilled_in_chunks() -> None:
    backend = tiny_backend()
    engine = LiveEngine(backend, max_len=512, prefill_budget=BUDGET)
    events: dict[str, list[LiveEvent]] = {}
    engine.submit(request(backend, "short", SHORT), SamplingParams(max_new_tokens=60), collect(events, "short"))

    def submit_long(step: int) -> None:
        if step == 3:
            engine.submit(request(backend, "long", LONG), SamplingParams(max_new_tokens=8), collect(events, "long"))

    feeds = record_feeds(backend)
    loop = engine._loop()
    log = StepLog(loop, submit_long)
    loop.listeners.append(log)
    for _ in loop.run():
        pass
    under_way = [step for step, prefilling in enumerate(log.prefilling) if 1 in prefilling]
    assert len(under_way) >= math.ceil(len(LONG) / BUDGET) - 1  # one chunk per step
    assert under_way == list(range(under_way[0], under_way[-1] + 1))
    for step in under_way:
        assert 1 not in log.generated[step]  # it holds a slot but does not decode
        assert log.generated[step + 1][0] == log.generated[step][0] + 1  # the short row: a token every step
    assert log.generated[under_way[-1] + 1][1] == 1  # its first token once its last chunk is in
    assert max(feeds) <= BUDGET
    assert [e.result.token_ids for e in events["long"] if isinstance(e, Finished)] == [
        r.token_ids for r in tiny_backend().generate([request(backend, "long", LONG)], SamplingParams(max_new_tokens=8))]


@needs_invariant
def test_cancelling_a_request_during_its_chunked_prefill_frees_its_slot() -> None:
    backend = tiny_backend(EngineConfig(batch_size=2))
    engine = LiveEngine(backend, max_len=512, prefill_budget=BUDGET)
    events: dict[str, list[LiveEvent]] = {}
    engine.submit(request(backend, "short", SHORT), SamplingParams(max_new_tokens=30), collect(events, "short"))
    tickets: dict[str, int] = {}

    def act(step: int) -> None:
        if step == 2:
            tickets["long"] = engine.submit(request(backend, "long", LONG), SamplingParams(max_new_tokens=8),
                                            collect(events, "long"))
        elif "long" in tickets and log.prefilling[-1] == {tickets["long"]} and "next" not in tickets:
            engine.cancel(tickets["long"])  # mid-prefill: its slot is the only free one
            tickets["next"] = engine.submit(request(backend, "next", "x = 1"), SamplingParams(max_new_tokens=4),
                                            collect(events, "next"))
            tickets["cancelled at"] = step

    loop = engine._loop()
    log = StepLog(loop, act)
    loop.listeners.append(log)
    for _ in loop.run():
        pass
    after = tickets["cancelled at"]  # the step after the cancel: the slot went to the next request
    assert log.prefilling[after] == set() and tickets["next"] in log.generated[after]
    assert engine.queue.entry(tickets["long"]) is None
    assert not any(isinstance(e, (Tokens, Finished)) for e in events["long"])
    assert [type(e) for e in events["next"]][-1] is Finished
    assert [type(e) for e in events["short"]][-1] is Finished


def test_without_batch_invariance_a_long_prompt_is_prefilled_whole() -> None:
    """Plain kernels promise no chunk the bits of a whole prefill: the answer must not depend on the load."""
    backend = tiny_backend(EngineConfig(batch_size=4, batch_invariant=False))
    engine = LiveEngine(backend, max_len=512, prefill_budget=BUDGET)
    events: dict[str, list[LiveEvent]] = {}
    engine.submit(request(backend, "short", SHORT), GREEDY, collect(events, "short"))
    engine.submit(request(backend, "long", LONG), GREEDY, collect(events, "long"))
    feeds = record_feeds(backend)
    loop = engine._loop()
    log = StepLog(loop)
    loop.listeners.append(log)
    for _ in loop.run():
        pass
    assert sorted(feeds) == [len(SHORT), len(LONG)] and not any(log.prefilling)
    assert log.generated[0] == {0: 1} and log.generated[1] == {0: 2, 1: 1}  # the next step, whole


@needs_invariant
def test_a_burst_of_long_and_short_prompts_answers_every_request_as_alone() -> None:
    """Prompts of every length against a small budget, a burst at once and more while the batch runs: a
    sample whose prompt completes at a step must keep its slot from the arrivals of that step."""
    backend = tiny_backend(EngineConfig(batch_size=4))
    engine = LiveEngine(backend, max_len=512, prefill_budget=BUDGET)
    texts = [(LONG * 2)[: 7 + 13 * i] for i in range(12)] + [SHORT[: 3 + i % 6] for i in range(12)]
    sampling = SamplingParams(max_new_tokens=6)
    events: dict[str, list[LiveEvent]] = {}
    requests = {f"r{i}": request(backend, f"r{i}", text, n=1 + i % 3) for i, text in enumerate(texts)}
    names = list(requests)
    for name in names[:12]:
        engine.submit(requests[name], sampling, collect(events, name))

    def submit_more(step: int) -> None:
        if 12 + step - 1 < len(names) and step % 2:
            for name in names[12 + step - 1 : 12 + step + 1]:
                engine.submit(requests[name], sampling, collect(events, name))

    loop = engine._loop()
    log = StepLog(loop, submit_more)
    loop.listeners.append(log)
    for _ in loop.run():
        pass
    assert any(log.prefilling)  # some prompts did go in chunks
    alone = tiny_backend(EngineConfig(batch_size=4))
    for name, req in requests.items():
        got = [tokens for tokens, _, _ in finished(events.get(name, []))]
        assert got == [r.token_ids for r in alone.generate([req], sampling)], name


@needs_invariant
def test_many_concurrent_clients_with_long_prompts_all_get_their_answers_over_http() -> None:
    """24 clients at once through a real server whose prefill budget chunks most prompts: each is answered
    (none waits forever) with what its prompt gives alone."""
    backend = tiny_backend(EngineConfig(batch_size=4))
    prompts = [(LONG * 3)[i : i + 20 + 11 * i] for i in range(24)]
    alone = tiny_backend(EngineConfig(batch_size=4))
    sampling = SamplingParams(max_new_tokens=8)
    expected = [alone.generate([request(alone, str(i), p, n=2)], sampling) for i, p in enumerate(prompts)]
    with serving(backend, prefill_budget=BUDGET) as served:
        def complete(prompt: str) -> list[str]:
            body = {"model": MODEL, "prompt": prompt, "max_tokens": 8, "temperature": 0, "n": 2}
            response = httpx.post(f"{served.url}/completions", json=body, timeout=120)
            assert response.status_code == 200, response.text
            return [choice["text"] for choice in response.json()["choices"]]

        with ThreadPoolExecutor(len(prompts)) as pool:
            answers = list(pool.map(complete, prompts))
        assert served.engine.loop is not None and served.engine.loop.stats.prefill_tokens > 0
    assert answers == [[r.text for r in results] for results in expected]
