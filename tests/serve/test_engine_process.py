"""The engine loop in a process of its own (quench.engine.serving.engine_process) behind a real server on loopback:
what one request gets alone is what the engine thread gives, bit for bit; a burst of 32 streaming clients each
gets what its request gets alone; a killed engine process fails every open request and comes back."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import torch

from live_server import MODEL, Served
from quench.engine.config import EngineConfig
from quench.engine.kernels import invariant
from quench.engine.serving.live import EngineProcess, EngineSpec, Finished, LiveEvent, QueueFull, Tokens
from quench.engine.types import GenerationRequest, SamplingParams

pytestmark = pytest.mark.slow  # each server spawns an engine process that loads torch
needs_invariant = pytest.mark.skipif(not invariant.available(torch.float32), reason="no native kernels built here")

# one request each: greedy, seeded top-p / top-k (n = 2), a stop sequence, ignore_eos with logprobs
CASES: list[dict[str, Any]] = [
    {"prompt": "def add(a, b):", "max_tokens": 24, "temperature": 0},
    {"prompt": "x = ", "max_tokens": 20, "temperature": 0.8, "top_p": 0.9, "seed": 7},
    {"prompt": "for i in", "max_tokens": 16, "temperature": 1.0, "top_k": 5, "seed": 3, "n": 2},
    {"prompt": "print(", "max_tokens": 30, "temperature": 0, "stop": [")", "\n"]},
    {"prompt": "class A:", "max_tokens": 12, "temperature": 0, "ignore_eos": True, "logprobs": 3},
]
CHAT = {"messages": [{"role": "user", "content": "sum of a list"}], "max_tokens": 16, "temperature": 0,
        "logprobs": True, "top_logprobs": 2}


def answer(url: str, route: str, body: dict[str, Any]) -> dict[str, Any]:
    """The answer without what differs per call (id, created)."""
    response = httpx.post(f"{url}/{route}", json={"model": MODEL, **body}, timeout=120)
    assert response.status_code == 200, response.text
    data = response.json()
    return {"choices": data["choices"], "usage": data["usage"]}


def streamed(url: str, body: dict[str, Any]) -> tuple[dict[int, str], dict[int, str], list[dict]]:
    """A streamed completion: text and finish reason per choice, and the error events of the stream (or the
    error of an answer refused before its stream opened)."""
    texts: dict[int, str] = {}
    reasons: dict[int, str] = {}
    errors: list[dict] = []
    with httpx.stream("POST", f"{url}/completions", json={"model": MODEL, "stream": True, **body}, timeout=120) as response:
        if response.status_code != 200:
            return texts, reasons, [json.loads(response.read())["error"]]
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[len("data: "):])
            if "error" in event:
                errors.append(event["error"])
                continue
            for choice in event["choices"]:
                texts[choice["index"]] = texts.get(choice["index"], "") + choice["text"]
                if choice["finish_reason"]:
                    reasons[choice["index"]] = choice["finish_reason"]
    return texts, reasons, errors


def test_each_request_alone_gets_what_the_engine_thread_gives(in_process: Served, served: Served) -> None:
    """Per-row settings, stop sequences, ignore_eos and logprobs: the same answer, bit for bit, with the engine
    loop in its process as in the server's thread (the same model, one request at a time)."""
    for body in CASES:
        assert answer(in_process.url, "completions", body) == answer(served.url, "completions", body), body
    assert answer(in_process.url, "chat/completions", CHAT) == answer(served.url, "chat/completions", CHAT)


def test_a_stream_carries_the_whole_answer(in_process: Served) -> None:
    body = {"prompt": "def add(a, b):", "max_tokens": 24, "temperature": 0}
    texts, reasons, errors = streamed(in_process.url, body)
    whole = answer(in_process.url, "completions", body)["choices"][0]
    assert not errors and texts[0] == whole["text"] and reasons[0] == whole["finish_reason"]


def long_and_short_prompts(count: int) -> list[str]:
    """Half short prompts, half long ones (well past the prefill budget below), interleaved."""
    long = "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n        self."
    return [(long * 4)[: 150 + 9 * i] if i % 2 else f"def f{i}(x):" for i in range(count)]


@needs_invariant
def test_a_burst_of_32_streaming_clients_each_gets_its_answer_alone(process_server) -> None:
    """32 concurrent streaming clients, long prompts (chunked: budget 32 tokens a step) and short ones, greedy and
    seeded sampling, through 8 slots: each stream is what the same request gets sent alone."""
    bodies = [{"prompt": prompt, "max_tokens": 12 + i % 7, "temperature": 0 if i % 3 else 0.7, "seed": i,
               "n": 1 + i % 2} for i, prompt in enumerate(long_and_short_prompts(32))]
    with process_server(EngineConfig(batch_size=8), prefill_budget=32) as running:
        alone = [answer(running.url, "completions", body)["choices"] for body in bodies]
        start = threading.Barrier(len(bodies))

        def client(body: dict[str, Any]) -> tuple[dict[int, str], dict[int, str], list[dict]]:
            start.wait()
            return streamed(running.url, body)

        with ThreadPoolExecutor(len(bodies)) as pool:
            together = list(pool.map(client, bodies))
        gauges = running.engine.gauges()
    for body, choices, (texts, reasons, errors) in zip(bodies, alone, together):
        assert not errors, errors
        assert texts == {c["index"]: c["text"] for c in choices}, body
        assert reasons == {c["index"]: c["finish_reason"] for c in choices}, body
    assert gauges.slots == 8 and gauges.rows_running == 0


def test_a_killed_engine_process_fails_every_open_request_and_the_server_comes_back(process_server) -> None:
    """SIGKILL to the engine process mid-stream: every open stream ends with an error event, a whole answer
    under way gets a 500, none waits; /health turns 503 then 200 with a fresh engine, which answers as before."""
    long = {"prompt": "x = ", "max_tokens": 400, "temperature": 0, "ignore_eos": True}
    probe = {"prompt": "def add(a, b):", "max_tokens": 24, "temperature": 0}
    with process_server(EngineConfig(batch_size=4)) as running:
        before = answer(running.url, "completions", probe)
        engine = running.engine
        assert isinstance(engine, EngineProcess)
        first_pid = engine.pid
        results: list[Any] = []

        def stream_client() -> None:
            results.append(streamed(running.url, long))

        def whole_client() -> None:
            response = httpx.post(f"{running.url}/completions", json={"model": MODEL, **long}, timeout=120)
            results.append((response.status_code, response.json()))

        clients = [threading.Thread(target=stream_client) for _ in range(5)] + [threading.Thread(target=whole_client)]
        for client in clients:
            client.start()
        deadline = time.monotonic() + 60
        while engine.gauges().requests_running + engine.gauges().requests_waiting < 6 or engine.gauges().rows_running < 4:
            assert time.monotonic() < deadline, "the requests did not start"
            time.sleep(0.01)
        os.kill(first_pid, signal.SIGKILL)
        for client in clients:
            client.join(60)
            assert not client.is_alive(), "a client still waits"
        streams = [r for r in results if isinstance(r[0], dict)]
        wholes = [r for r in results if isinstance(r[0], int)]
        assert len(streams) == 5 and len(wholes) == 1
        for texts, reasons, errors in streams:  # a 500 for a stream not started yet, an error event for the others
            assert len(errors) == 1 and "engine process exited" in errors[0]["message"] and not reasons
        assert sum(bool(texts) for texts, _, _ in streams) >= 3  # streams under way when the engine died
        status, body = wholes[0]
        assert status == 500 and "engine process exited" in body["error"]["message"]
        deadline = time.monotonic() + 120
        while httpx.get(f"{running.url.removesuffix('/v1')}/health", timeout=10).status_code != 200:
            assert time.monotonic() < deadline, "the engine did not come back"
            time.sleep(0.1)
        assert engine.restarts == 1 and engine.pid != first_pid
        assert answer(running.url, "completions", probe) == before


def collect(events: dict[int, list[LiveEvent]], key: int):
    return lambda event: events.setdefault(key, []).append(event)


def test_a_full_queue_is_refused_at_submit_and_counts_only_requests_not_started() -> None:
    """max_waiting 1 over one slot: one running and one waiting fill it (QueueFull), as in the engine thread."""
    from functools import partial

    from live_server import tiny_backend

    config = EngineConfig(batch_size=1)
    engine = EngineProcess(EngineSpec(partial(tiny_backend, config), 512, max_waiting=1, threads=1)).start()
    try:
        ids = tuple(tiny_backend(config).tokenizer("x = ")["input_ids"])
        events: dict[int, list[LiveEvent]] = {}
        sampling = SamplingParams(max_new_tokens=300, ignore_eos=True)
        engine.submit(GenerationRequest("seed:a", ids, 1), sampling, collect(events, 0))
        deadline = time.monotonic() + 60
        while not any(isinstance(e, Tokens) for e in events.get(0, [])):
            assert time.monotonic() < deadline
            time.sleep(0.005)
        waiting = engine.submit(GenerationRequest("seed:b", ids, 1), sampling, collect(events, 1))
        with pytest.raises(QueueFull):
            engine.submit(GenerationRequest("seed:c", ids, 1), sampling, collect(events, 2))
        engine.cancel(waiting)  # no longer waiting: room again
        engine.submit(GenerationRequest("seed:d", ids, 1), SamplingParams(max_new_tokens=4), collect(events, 3))
        deadline = time.monotonic() + 120
        while not any(isinstance(e, Finished) for e in events.get(3, [])):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert 1 not in events or not any(isinstance(e, Finished) for e in events[1])  # cancelled: told nothing more
    finally:
        engine.stop()


def test_metrics_show_the_engine_process_and_its_pipe(in_process: Served) -> None:
    answer(in_process.url, "completions", CASES[0])
    text = httpx.get(f"{in_process.url.removesuffix('/v1')}/metrics", timeout=10).text
    values = dict(line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
    assert values["quench_batch_slots"] == "4"
    assert int(values["quench_engine_messages_total"]) > 0
    assert float(values["quench_engine_send_seconds_total"]) > 0
