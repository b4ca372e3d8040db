"""--backend openai: against `quench serve` on loopback (same text as the local engine, same robustness
metrics) and against a small fault-injecting server (retries, then a clear error that loses nothing done)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest

from helpers import save_tiny_model
from live_server import MODEL, serving, tiny_backend
from quench.datasets import Problem
from quench.engine.types import GenerationRequest, SamplingParams
from quench.errors import QuenchError
from quench.runs.openai_backend import OpenAIBackend, OpenAIOptions, ServerError, chat_message, encode
from quench.runs.samples import GenerateConfig, generate_samples

GREEDY = SamplingParams(max_new_tokens=16)
PROMPTS = ["def add(a, b):\n", "import os\nprint(", "class Stack:\n    def"]


@pytest.mark.parametrize("prompt_format", ["completion", "chat"])
def test_quench_serve_gives_the_local_engines_text(prompt_format: str) -> None:
    local = tiny_backend()
    if prompt_format == "completion":
        local_requests = [GenerationRequest(p, tuple(local.tokenizer(p)["input_ids"]), 2) for p in PROMPTS]
    else:
        local_requests = [GenerationRequest(p, tuple(local.tokenizer(local.tokenizer.apply_chat_template(
            [{"role": "user", "content": chat_message(p)}], tokenize=False, add_generation_prompt=True),
            add_special_tokens=False)["input_ids"]), 2) for p in PROMPTS]
    expected = {(r.key, r.sample_index): r.text for r in local.generate(local_requests, GREEDY)}
    with serving(tiny_backend()) as served:
        remote = OpenAIBackend(OpenAIOptions(served.url, MODEL, prompt_format, concurrency=2))
        text = chat_message if prompt_format == "chat" else str
        requests = [GenerationRequest(p, encode(text(p)), 2) for p in PROMPTS]
        got = {(r.key, r.sample_index): r for r in remote.generate(requests, GREEDY)}
    assert {k: r.text for k, r in got.items()} == expected
    assert all(r.extra["server_model"] == MODEL for r in got.values())
    assert remote.served_models == {MODEL}


def test_samples_served_remotely_record_the_servers_token_counts(tmp_path: Path) -> None:
    config = GenerateConfig(n=1, sampling=GREEDY, prompt_format="completion")
    with serving(tiny_backend()) as served:
        remote = OpenAIBackend(OpenAIOptions(served.url, MODEL, "completion", concurrency=2))
        records = generate_samples(problems(2), remote, encode, config, tmp_path / "samples.jsonl")
    assert [r.num_tokens for r in records] == [r.extra["completion_tokens"] for r in records]
    assert all(r.num_tokens > 0 for r in records)


class Fake:
    """A tiny OpenAI-style server whose answers follow a script: "ok", "500", "429", "400", "hang", "close",
    "one" (one choice whatever n asks); the script's last entry repeats."""

    def __init__(self, script: list[str]) -> None:
        self.script = list(script)
        self.received: list[dict] = []
        self.headers: list[dict] = []
        self.lock = threading.Lock()

    def next(self, body: dict) -> str:
        with self.lock:
            self.received.append(body)
            return self.script.pop(0) if len(self.script) > 1 else self.script[0]


@contextmanager
def fake_server(fake: Fake) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            fake.headers.append(dict(self.headers))
            action = fake.next(body)
            if action == "hang":
                time.sleep(3)
                return
            if action == "close":  # promise a body, send half of it, hang up
                self.send_response(200)
                self.send_header("Content-Length", "1000")
                self.end_headers()
                self.wfile.write(b'{"choices": [')
                self.wfile.flush()
                self.connection.close()
                return
            if action in ("500", "429", "400"):
                payload = {"error": {"message": f"injected {action}", "type": "x"}}
                self.reply(int(action), payload)
                return
            n = 1 if action == "one" else body.get("n", 1)
            text = f"answer to {body['prompt'][:12]!r} seed {body.get('seed')}"
            self.reply(200, {"model": "fake-model", "usage": {"prompt_tokens": 3, "completion_tokens": 4 * n},
                             "choices": [{"index": i, "text": f"{text} #{i}", "finish_reason": "length"}
                                         for i in range(n)]})

        def reply(self, status: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def fake_backend(url: str, **options) -> OpenAIBackend:
    settings = {"prompt_format": "completion", "concurrency": 1, "timeout_s": 1.0, "max_retries": 3, "backoff_s": 0.01,
                **options}
    return OpenAIBackend(OpenAIOptions(url, "fake-model", **settings))


def requests(count: int, n: int = 1) -> list[GenerationRequest]:
    return [GenerationRequest(f"task/{i}", encode(f"prompt {i}"), n) for i in range(count)]


@pytest.mark.parametrize("fault", ["500", "429", "hang", "close"])
def test_a_fault_is_retried_until_the_server_answers(fault: str) -> None:
    fake = Fake([fault, fault, "ok"])
    with fake_server(fake) as url:
        [result] = fake_backend(url).generate(requests(1), GREEDY)
    assert len(fake.received) == 3
    assert result.text.startswith("answer to 'prompt 0'") and result.extra["server_model"] == "fake-model"


def test_a_refusal_is_not_retried_and_names_the_servers_message() -> None:
    fake = Fake(["400"])
    with fake_server(fake) as url, pytest.raises(ServerError, match="refused 'task/0': HTTP 400: injected 400"):
        list(fake_backend(url).generate(requests(1), GREEDY))
    assert len(fake.received) == 1


def test_n_samples_come_from_one_request_or_from_distinct_seeds() -> None:
    fake = Fake(["ok"])
    with fake_server(fake) as url:
        results = sorted(fake_backend(url).generate(requests(1, n=3), GREEDY), key=lambda r: r.sample_index)
    assert len(fake.received) == 1 and fake.received[0]["n"] == 3
    assert [r.sample_index for r in results] == [0, 1, 2]
    assert results[0].extra["completion_tokens"] == 4.0  # the request's usage, shared by its samples

    fake = Fake(["one"])  # a server that ignores n
    with fake_server(fake) as url:
        results = sorted(fake_backend(url).generate(requests(1, n=3), GREEDY), key=lambda r: r.sample_index)
    assert [r.sample_index for r in results] == [0, 1, 2]
    seeds = [body["seed"] for body in fake.received[1:]]
    assert all(body["n"] == 1 for body in fake.received[1:]) and len(set(seeds)) == 3


def problems(count: int) -> list[Problem]:
    return [Problem(f"task/{i}", f"prompt {i}", "", "", "f") for i in range(count)]


def test_a_server_that_keeps_failing_loses_nothing_done_and_the_rerun_sends_only_the_rest(tmp_path: Path) -> None:
    config = GenerateConfig(n=1, sampling=GREEDY, prompt_format="completion")
    path = tmp_path / "samples.jsonl"
    fake = Fake(["ok", "ok", "500"])  # two requests answered, then the server breaks for good
    with fake_server(fake) as url, pytest.raises(QuenchError, match="failed 4 times .*HTTP 500.* run again"):
        generate_samples(problems(5), fake_backend(url), encode, config, path)
    saved = [json.loads(line)["task_id"] for line in path.read_text().splitlines()]
    assert saved == ["task/0", "task/1"]
    fake = Fake(["ok"])
    with fake_server(fake) as url:
        records = generate_samples(problems(5), fake_backend(url), encode, config, path)
    assert [body["prompt"] for body in fake.received] == ["prompt 2", "prompt 3", "prompt 4"]
    assert sorted(r.task_id for r in records) == [f"task/{i}" for i in range(5)]


def test_the_api_key_is_sent_and_written_nowhere(tmp_path: Path, monkeypatch, capsys) -> None:
    from quench.cli.main import main

    key = "sk-test-4f1e9b27c0"
    monkeypatch.setenv("QUENCH_TEST_KEY", key)
    fake = Fake(["ok"])
    with fake_server(fake) as url:
        code = main(["-v", "generate", "--backend", "openai", "--base-url", url, "--api-key-env", "QUENCH_TEST_KEY",
                     "--model", "fake-model", "--prompt-format", "completion", "--tasks", "0-1",
                     "--out", str(tmp_path / "run")])
    assert code == 0
    assert {h.get("Authorization") for h in fake.headers} == {f"Bearer {key}"}
    written = "".join(p.read_text() for p in (tmp_path / "run").rglob("*") if p.is_file())
    captured = capsys.readouterr()
    assert key not in written + captured.out + captured.err
    assert json.loads((tmp_path / "run" / "config.json").read_text())["backend"] == "openai"


@pytest.mark.slow
def test_robustness_over_quench_serve_gives_the_local_metrics(tmp_path: Path) -> None:
    from quench.models import load_model
    from quench.runs.backends import BackendOptions, make_engine
    from quench.engine.config import EngineConfig

    model_dir = save_tiny_model(tmp_path / "tiny")
    flags = ["robustness", "--tasks", "0-1", "--transforms", "FuncRenameCamelCase,tab_indent", "--seeds", "1",
             "--max-new-tokens", "16", "--timeout", "5", "--workers", "2", "--prompt-format", "completion"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def run(*extra: str, out: Path) -> dict:
        argv = [sys.executable, "-m", "quench.cli.main", "--threads", "1", *flags, *extra, "--out", str(out)]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads((out / "metrics.json").read_text())["metrics"]

    local = run("--model", str(model_dir), out=tmp_path / "local")
    loaded = load_model(str(model_dir), prompt_format="completion")
    backend = make_engine(loaded, BackendOptions(engine=EngineConfig(batch_size=4)))
    with serving(backend, max_model_len=2048, model_name="tiny") as served:
        remote = run("--backend", "openai", "--base-url", served.url, "--model", "tiny", out=tmp_path / "remote")
    assert remote == local
