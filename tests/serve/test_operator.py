"""Limits checked before work, fairness under load, and the operator's view (access log, /metrics, /health),
against a real server on loopback."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from urllib.parse import urlparse

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from live_server import MODEL, Served

GOOD = {"model": MODEL, "prompt": "def f(x):", "max_tokens": 4, "temperature": 0}


class CountingTokenizer:
    """The served tokenizer, counting the calls that tokenize text."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.tokenizer(*args, **kwargs)

    def apply_chat_template(self, *args, **kwargs):
        self.calls += 1
        return self.tokenizer.apply_chat_template(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.tokenizer, name)


@pytest.fixture
def counting(served: Served):
    tokenizer = served.service.tokenizer
    served.service.tokenizer = counter = CountingTokenizer(tokenizer)
    yield counter
    served.service.tokenizer = tokenizer


def test_a_5_mb_body_is_refused_before_it_is_tokenized(served: Served, counting: CountingTokenizer) -> None:
    big = {**GOOD, "prompt": "x" * (5 << 20)}
    response = httpx.post(f"{served.url}/completions", json=big, timeout=30)
    assert response.status_code == 413
    assert "limit" in response.json()["error"]["message"]
    assert counting.calls == 0


@pytest.mark.parametrize("route, change", [
    ("completions", {"prompt": "x" * 6000}),
    ("chat/completions", {"prompt": None, "messages": [{"role": "user", "content": "é" * 3000}]}),
])
def test_a_prompt_longer_than_the_context_can_hold_is_refused_by_its_bytes(
        served: Served, counting: CountingTokenizer, route: str, change: dict) -> None:
    body = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    response = httpx.post(f"{served.url}/{route}", json=body, timeout=30)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "context_length_exceeded" and "bytes" in error["message"]
    assert counting.calls == 0
    fits = {**GOOD, "prompt": "x" * 100}
    assert httpx.post(f"{served.url}/completions", json=fits, timeout=30).status_code == 200
    assert counting.calls == 1  # the byte bound lets a prompt that fits through to the tokenizer


def test_a_small_request_is_answered_while_a_large_one_streams(served: Served) -> None:
    large = {**GOOD, "prompt": "x = [1, 2, 3]\nfor", "n": 8, "max_tokens": 480, "stream": True}
    ended: list[str] = []

    def stream_large() -> None:
        with httpx.stream("POST", f"{served.url}/completions", json=large, timeout=60) as response:
            for line in response.iter_lines():
                if '"finish_reason": "' in line and not ended:  # a sample of it finished
                    ended.append("large")

    thread = threading.Thread(target=stream_large)
    thread.start()
    while served.engine.queue.counts()[0] == 0:  # until the large one runs
        time.sleep(0.005)
    small = httpx.post(f"{served.url}/completions", json=GOOD, timeout=60)
    answered_while_large_ran = not ended
    thread.join(60)
    assert small.status_code == 200
    assert answered_while_large_ran


def test_metrics_parse_and_count_what_was_served(served: Served) -> None:
    for stream in (False, True):
        assert httpx.post(f"{served.url}/completions", json={**GOOD, "stream": stream}, timeout=30).status_code == 200
    text = httpx.get(served.url.removesuffix("/v1") + "/metrics", timeout=10).text
    families = {family.name: family for family in text_string_to_metric_families(text)}
    for name in ("quench_requests_running", "quench_requests_waiting", "quench_rows_waiting", "quench_kv_cache_usage_ratio",
                 "quench_generation_tokens", "quench_draft_tokens_accepted", "quench_time_to_first_token_seconds",
                 "quench_inter_token_latency_seconds"):
        assert name in families, name
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples}
    assert samples[("quench_generation_tokens_total", ())] >= 8
    assert samples[("quench_time_to_first_token_seconds_count", ())] >= 2
    assert samples[("quench_inter_token_latency_seconds_count", ())] >= 6  # 3 gaps in each 4-token answer
    assert samples[("quench_requests_total", (("outcome", "ok"),))] >= 2


def test_health_says_ok(served: Served) -> None:
    response = httpx.get(served.url.removesuffix("/v1") + "/health", timeout=10)
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def connect(served: Served) -> socket.socket:
    address = urlparse(served.url)
    return socket.create_connection((address.hostname, address.port), timeout=10)


def access_lines(caplog, ident_part: str = "") -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "quench.serve.access" and ident_part in r.getMessage()]


def test_a_client_that_leaves_mid_body_is_one_info_line_and_no_traceback(served: Served, caplog) -> None:
    caplog.set_level(logging.INFO)
    body = json.dumps({**GOOD, "prompt": "x" * 2000}).encode()
    with connect(served) as client:
        client.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       + f"Content-Length: {len(body)}\r\n\r\n".encode() + body[:100])
        time.sleep(0.2)
    deadline = time.monotonic() + 10
    while not access_lines(caplog, "outcome=disconnected") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(access_lines(caplog, "outcome=disconnected")) == 1
    assert [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR] == []


def test_a_client_that_leaves_mid_stream_is_one_info_line_and_no_traceback(served: Served, caplog) -> None:
    caplog.set_level(logging.INFO)
    body = json.dumps({**GOOD, "max_tokens": 400, "stream": True}).encode()
    with connect(served) as client:
        client.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        assert b"data:" in client.recv(4096) + client.recv(4096)
    deadline = time.monotonic() + 10
    while not access_lines(caplog, "outcome=disconnected") and time.monotonic() < deadline:
        time.sleep(0.05)
    [line] = access_lines(caplog, "outcome=disconnected")
    assert "ttft=" in line.getMessage() and "completion_tokens=" in line.getMessage()
    assert [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR] == []
    while served.engine.queue.held():  # its rows are freed
        time.sleep(0.01)


def test_each_request_has_one_access_line_with_its_tokens_and_times(served: Served, caplog) -> None:
    caplog.set_level(logging.INFO)
    answer = httpx.post(f"{served.url}/completions", json=GOOD, timeout=30).json()
    [record] = access_lines(caplog, answer["id"])
    line = record.getMessage()
    usage = answer["usage"]
    for part in ("status=200", "outcome=ok", f"prompt_tokens={usage['prompt_tokens']}",
                 f"completion_tokens={usage['completion_tokens']}", "ttft=", "total=", "finish=length"):
        assert part in line, (part, line)
