"""Bad requests get OpenAI-style 4xx errors; a full queue 429; a client that leaves frees its rows."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
import torch

from live_server import MODEL, Served, serving, tiny_backend

GOOD = {"model": MODEL, "prompt": "def f(x):", "max_tokens": 4, "temperature": 0}


@pytest.mark.parametrize("change, status, param, words", [
    ({"model": "gpt-4"}, 404, "model", "does not exist"),
    ({"n": 0}, 400, "n", "greater than or equal to 1"),
    ({"n": 9}, 400, "n", "at most 8"),
    ({"max_tokens": -5}, 400, "max_tokens", "greater than or equal to 1"),
    ({"max_tokens": 600}, 400, "max_tokens", "maximum context length is 512"),
    ({"prompt": "x" * 600}, 400, "prompt", "maximum context length is 512"),
    ({"prompt": ""}, 400, "prompt", "must not be empty"),
    ({"prompt": [5, 100000]}, 400, "prompt", "token ids"),
    ({"n": "two"}, 400, "n", "valid integer"),
    ({"temperature": "hot"}, 400, "temperature", "valid number"),
    ({"temperature": -1}, 400, "temperature", "greater than or equal to 0"),
    ({"top_p": 0}, 400, "top_p", "greater than 0"),
    ({"stop": 3}, 400, "stop", "valid string"),
    ({"stream": "yes"}, 400, "stream", "valid boolean"),
    ({"logprobs": 21}, 400, "logprobs", "less than or equal to 20"),
    ({"echo": True}, 400, "echo", "not supported"),
    ({"prompt": None}, 400, "prompt", "valid string"),
])
def test_bad_completion_requests_get_openai_errors(served: Served, change, status, param, words) -> None:
    response = httpx.post(f"{served.url}/completions", json={**GOOD, **change}, timeout=30)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["param"] is not None and error["param"].startswith(param)
    assert words in error["message"]
    assert error["type"] in ("invalid_request_error",)


@pytest.mark.parametrize("body, words", [
    (b"{not json", "not valid JSON"),
    (b"[1, 2]", "must be a JSON object"),
    (b'{"prompt": "a"}', "model: Field required"),
    (b"\xff\xfe", "not valid JSON"),
])
def test_malformed_bodies_get_400(served: Served, body: bytes, words: str) -> None:
    response = httpx.post(f"{served.url}/completions", content=body, timeout=30)
    assert response.status_code == 400
    assert words in response.json()["error"]["message"]


@pytest.mark.parametrize("change, param", [
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages.0.role"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages.0.content"),
    ({"messages": "hi"}, "messages"),
    ({"model": "nope"}, "model"),
])
def test_bad_chat_requests_get_openai_errors(served: Served, change, param) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **change}
    response = httpx.post(f"{served.url}/chat/completions", json=body, timeout=30)
    assert response.status_code in (400, 404)
    assert response.json()["error"]["param"].startswith(param)


def test_the_server_still_answers_after_every_bad_request(served: Served) -> None:
    for body in (b"{", b'{"model": 1}', b'{"model": "tiny", "prompt": {"a": 1}}'):
        httpx.post(f"{served.url}/completions", content=body, timeout=30)
    assert httpx.post(f"{served.url}/completions", json=GOOD, timeout=30).status_code == 200


def test_a_client_that_leaves_a_stream_frees_its_rows_at_the_next_step(served: Served) -> None:
    body = {**GOOD, "prompt": "x = [1, 2, 3]\nfor", "max_tokens": 480, "stream": True}
    steps_before = served.engine.loop.stats.steps if served.engine.loop else 0
    with httpx.stream("POST", f"{served.url}/completions", json=body, timeout=30) as response:
        lines = response.iter_lines()
        assert next(line for line in lines if line.startswith("data: {"))
    deadline = time.monotonic() + 10
    while served.engine.queue.held() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert served.engine.queue.held() == 0
    loop = served.engine.loop
    time.sleep(0.2)
    assert all(row is None for row in loop.slots)
    assert loop.stats.steps - (steps_before if loop is served.engine.loop else 0) < 480  # it did not run to the end
    assert httpx.post(f"{served.url}/completions", json=GOOD, timeout=30).status_code == 200


def test_a_client_that_leaves_a_whole_answer_frees_its_rows(served: Served) -> None:
    body = {**GOOD, "prompt": "x = [1, 2, 3]\nfor", "max_tokens": 480}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{served.url}/completions", json=body, timeout=httpx.Timeout(5.0, read=0.05))  # it leaves mid-answer
    deadline = time.monotonic() + 10
    while served.engine.queue.held() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert served.engine.queue.held() == 0


def test_a_full_queue_answers_429_and_a_stopping_engine_503() -> None:
    torch.set_num_threads(1)
    with serving(tiny_backend(), max_waiting=1, start_engine=False) as served:  # nothing leaves the queue
        first: list[httpx.Response] = []
        waiting = threading.Thread(target=lambda: first.append(
            httpx.post(f"{served.url}/completions", json=GOOD, timeout=30)))
        waiting.start()
        deadline = time.monotonic() + 10
        while served.engine.queue.held() == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        second = httpx.post(f"{served.url}/completions", json=GOOD, timeout=30)
        assert second.status_code == 429
        assert second.json()["error"]["type"] == "rate_limit_exceeded"
        assert float(second.headers["retry-after"]) > 0
        assert httpx.get(served.url.removesuffix("/v1") + "/health", timeout=10).status_code == 503  # no engine
        served.engine.stop()
        waiting.join(30)
        assert first[0].status_code == 503
        assert "shutting down" in first[0].json()["error"]["message"]
        assert httpx.post(f"{served.url}/completions", json=GOOD, timeout=30).status_code == 503
