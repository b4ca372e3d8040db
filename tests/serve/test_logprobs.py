"""Log-probabilities of committed tokens (quench.engine.logprobs) in the live engine and the HTTP API."""

from __future__ import annotations

import json
import math
import threading

import httpx
import pytest
import torch

from helpers import tiny_llama
from live_server import MODEL, serving, tiny_backend
from quench.engine.config import EngineConfig
from quench.engine.serving.live import Finished, LiveEngine, LiveEvent, Tokens
from quench.engine.types import GenerationRequest, SamplingParams


def run(engine: LiveEngine, prompt: str, sampling: SamplingParams, top: int | None, n: int = 1, key: str = "k"):
    """(finished events by sample, every Tokens event) of one request."""
    events: list[LiveEvent] = []
    done = threading.Event()

    def sink(event: LiveEvent) -> None:
        events.append(event)
        if sum(isinstance(e, Finished) for e in events) == n:
            done.set()

    ids = tuple(engine.backend.tokenizer(prompt)["input_ids"])
    engine.submit(GenerationRequest(key, ids, n), sampling, sink, top)
    assert done.wait(60)
    finished = sorted((e for e in events if isinstance(e, Finished)), key=lambda e: e.result.sample_index)
    return finished, [e for e in events if isinstance(e, Tokens)]


def reference_logprobs(backend, prompt: str, tokens: tuple[int, ...]) -> list[float]:
    """Each token's log-probability from one plain forward pass of the model over prompt + tokens."""
    ids = list(backend.tokenizer(prompt)["input_ids"]) + list(tokens)
    with torch.no_grad():
        logits = tiny_llama(max_positions=1024)(torch.tensor([ids])).logits[0].float()  # (S, V): tiny_backend's model
    logprobs = torch.log_softmax(logits, dim=-1)
    start = len(ids) - len(tokens) - 1
    return [float(logprobs[start + i, t]) for i, t in enumerate(tokens)]


@pytest.mark.parametrize("drafter", ["none", "ngram"])
def test_greedy_logprobs_are_the_models_and_the_top_alternative_is_the_token(drafter: str) -> None:
    backend = tiny_backend(EngineConfig(batch_size=4, drafter=drafter))
    engine = LiveEngine(backend, 512).start()
    try:
        prompt = "def f(x):\n    return x + x + x + x"
        [plain], _ = run(engine, prompt, SamplingParams(max_new_tokens=24), None, key="a")
        [scored], chunks = run(engine, prompt, SamplingParams(max_new_tokens=24), 3, key="b")
    finally:
        engine.stop()
    assert plain.logprobs is None
    assert scored.result.token_ids == plain.result.token_ids  # scoring does not change the answer
    assert [lp.token for lp in scored.logprobs] == list(scored.result.token_ids)
    for lp in scored.logprobs:
        assert len(lp.top) == 3 and lp.top[0] == (lp.token, lp.logprob)  # greedy: the likeliest token
        assert lp.top[0][1] >= lp.top[1][1] >= lp.top[2][1]
    expected = reference_logprobs(backend, prompt, scored.result.token_ids)
    assert [lp.logprob for lp in scored.logprobs] == pytest.approx(expected, abs=1e-4)
    streamed = [lp for chunk in chunks for lp in chunk.logprobs]
    assert streamed == list(scored.logprobs)[: len(streamed)]


def test_sampled_logprobs_are_the_models_before_temperature() -> None:
    backend = tiny_backend(EngineConfig(batch_size=4))
    engine = LiveEngine(backend, 512).start()
    try:
        prompt = "def g(y):\n"
        finished, _ = run(engine, prompt, SamplingParams(temperature=1.5, top_p=0.9, max_new_tokens=12), 0, n=3)
    finally:
        engine.stop()
    for sample in finished:
        assert [lp.token for lp in sample.logprobs] == list(sample.result.token_ids)
        assert all(lp.top == () and lp.logprob <= 0 for lp in sample.logprobs)
        expected = reference_logprobs(backend, prompt, sample.result.token_ids)
        assert [lp.logprob for lp in sample.logprobs] == pytest.approx(expected, abs=1e-4)


def test_completions_and_chat_return_logprobs_in_the_apis_shapes() -> None:
    with serving(tiny_backend()) as served:
        body = {"model": MODEL, "prompt": "def h(z):\n", "max_tokens": 8, "temperature": 0, "logprobs": 2}
        answer = httpx.post(f"{served.url}/completions", json=body, timeout=60).json()
        choice = answer["choices"][0]
        logprobs = choice["logprobs"]
        assert "".join(logprobs["tokens"]) == choice["text"]
        assert len(logprobs["token_logprobs"]) == len(logprobs["top_logprobs"]) == len(logprobs["tokens"]) == 8
        assert logprobs["text_offset"][0] == len(body["prompt"])
        for token, value, top in zip(logprobs["tokens"], logprobs["token_logprobs"], logprobs["top_logprobs"]):
            assert len(top) == 2 and math.isclose(top[token], value)
        chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 6, "temperature": 0,
                "logprobs": True, "top_logprobs": 1}
        answer = httpx.post(f"{served.url}/chat/completions", json=chat, timeout=60).json()
        choice = answer["choices"][0]
        content = choice["logprobs"]["content"]
        assert "".join(item["token"] for item in content) == choice["message"]["content"]
        for item in content:
            assert item["bytes"] == list(item["token"].encode())
            assert item["top_logprobs"] == [{"token": item["token"], "logprob": item["logprob"], "bytes": item["bytes"]}]
        plain = {key: value for key, value in chat.items() if key not in ("logprobs", "top_logprobs")}
        plain = httpx.post(f"{served.url}/chat/completions", json=plain, timeout=60).json()
        assert plain["choices"][0]["logprobs"] is None
        assert plain["choices"][0]["message"]["content"] == choice["message"]["content"]
        refused = httpx.post(f"{served.url}/chat/completions", json={**chat, "logprobs": False}, timeout=60)
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "top_logprobs"
        too_many = httpx.post(f"{served.url}/completions", json={**body, "logprobs": 21}, timeout=60)
        assert too_many.status_code == 400 and too_many.json()["error"]["param"] == "logprobs"


def test_tokens_past_a_stop_sequence_are_not_listed() -> None:
    with serving(tiny_backend()) as served:
        body = {"model": MODEL, "prompt": "def h(z):\n", "max_tokens": 8, "temperature": 0, "logprobs": 0}
        full = httpx.post(f"{served.url}/completions", json=body, timeout=60).json()["choices"][0]
        stop = full["text"][3:5]
        cut = httpx.post(f"{served.url}/completions", json={**body, "stop": [stop]}, timeout=60).json()["choices"][0]
    assert cut["text"] == full["text"][: full["text"].index(stop)]
    assert "".join(cut["logprobs"]["tokens"]) == cut["text"]
    assert cut["logprobs"]["token_logprobs"] == full["logprobs"]["token_logprobs"][: len(cut["text"])]
    assert cut["logprobs"]["top_logprobs"] is None  # logprobs 0: no alternatives


def test_a_stream_carries_every_tokens_logprob_once_in_order() -> None:
    with serving(tiny_backend()) as served:
        body = {"model": MODEL, "prompt": "def k(w):\n", "max_tokens": 20, "temperature": 0, "logprobs": 1, "n": 2,
                "stop": ["zz"]}
        whole = httpx.post(f"{served.url}/completions", json=body, timeout=60).json()
        streamed: dict[int, dict[str, list]] = {}
        with httpx.stream("POST", f"{served.url}/completions", json={**body, "stream": True}, timeout=60) as response:
            for line in response.iter_lines():
                if not line.startswith("data: {"):
                    continue
                for choice in json.loads(line[len("data: "):])["choices"]:
                    parts = streamed.setdefault(choice["index"], {"tokens": [], "token_logprobs": [], "text_offset": []})
                    for key in parts:
                        parts[key].extend((choice["logprobs"] or {}).get(key, []))
    for choice in whole["choices"]:
        expected = choice["logprobs"]
        assert "".join(expected["tokens"]) == choice["text"]
        assert streamed[choice["index"]] == {key: expected[key] for key in ("tokens", "token_logprobs", "text_offset")}


def test_the_openai_client_reads_the_logprobs() -> None:
    openai = pytest.importorskip("openai")
    with serving(tiny_backend()) as served:
        client = openai.OpenAI(base_url=served.url, api_key="unused", max_retries=0)
        chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=5,
                                              temperature=0, logprobs=True, top_logprobs=2)
        items = chat.choices[0].logprobs.content
        assert "".join(item.token for item in items) == chat.choices[0].message.content
        assert all(len(item.top_logprobs) == 2 and item.top_logprobs[0].logprob == item.logprob for item in items)
        completion = client.completions.create(model=MODEL, prompt="def q():", max_tokens=5, temperature=0, logprobs=1)
        logprobs = completion.choices[0].logprobs
        assert "".join(logprobs.tokens) == completion.choices[0].text and len(logprobs.token_logprobs) == 5
