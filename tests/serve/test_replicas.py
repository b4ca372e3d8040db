"""`quench serve --ray`: engine replicas on a real two-node Ray cluster on this machine, one endpoint (Ray Serve).

Skipped without Ray Serve (the `serve-ray` extra). Nodes talk over loopback, as in tests/distributed.
"""

from __future__ import annotations

import os

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # before Ray is imported: see tests/distributed/conftest.py

import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from helpers import save_tiny_model
from quench.distributed import ModelSpec
from quench.engine.config import EngineConfig
from quench.engine.types import GenerationRequest, SamplingParams
from quench.models import load_model
from quench.runs.backends import BackendOptions, make_backend
from quench.serve.service import ServeConfig

ray = pytest.importorskip("ray")
pytest.importorskip("ray.serve", reason="Ray Serve is not installed (pip install 'quench-code[serve-ray]')")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
NODE = {"num_cpus": 1, "object_store_memory": 100 * 1024**2, "node_ip_address": "127.0.0.1"}
FOUR_ROWS = BackendOptions(name="quench", engine=EngineConfig(batch_size=4))
PROMPTS = ["def add(a, b):\n    return", "def f(x):\n", "class A:\n    def g(self):"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    """A head and a worker node, one CPU each; the cluster's address and a tiny model directory."""
    from ray.cluster_utils import Cluster

    model_dir = save_tiny_model(tmp_path_factory.mktemp("tiny-model"))
    temp = tempfile.mkdtemp(prefix="qsrv")  # short: Ray's socket paths live under it
    nodes = Cluster(initialize_head=True, head_node_args={**NODE, "temp_dir": temp, "include_dashboard": False})
    try:
        nodes.add_node(**NODE)
        ray.init(address=nodes.address, log_to_driver=False, logging_level="warning")
        yield nodes.address, model_dir
    finally:
        ray.shutdown()
        nodes.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="class")
def endpoint(cluster) -> Iterator[tuple[str, Path]]:
    """Two replicas of the tiny model, one per node, behind http://127.0.0.1:PORT/v1."""
    from quench.serve import replicas

    model_dir = cluster[1]
    port = free_port()
    spec = ModelSpec(str(model_dir), "float32", "cpu", "completion", FOUR_ROWS)
    # two requests in flight per replica at most: four concurrent ones are sure to reach both replicas
    options = replicas.ReplicaOptions(replicas=2, max_ongoing_requests=2)
    replicas.start(spec, ServeConfig("tiny", 0, shutdown_timeout=2), 512, options, "127.0.0.1", port)
    try:
        yield f"http://127.0.0.1:{port}/v1", model_dir
    finally:
        replicas.stop()


def complete(url: str, prompt: str, max_tokens: int, timeout: float = 60.0) -> httpx.Response:
    body = {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    return httpx.post(f"{url}/completions", json=body, timeout=timeout)


def local_greedy(model_dir: Path, prompts: list[str], max_tokens: int) -> list[str]:
    loaded = load_model(str(model_dir), "float32", "cpu", "completion")
    backend = make_backend(loaded, FOUR_ROWS)
    requests = [GenerationRequest(str(i), tuple(loaded.tokenizer(p)["input_ids"]), 1) for i, p in enumerate(prompts)]
    results = sorted(backend.generate(requests, SamplingParams(max_new_tokens=max_tokens)), key=lambda r: int(r.key))
    return [r.text for r in results]


def replica_actors() -> list[str]:
    return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if "SERVE_REPLICA" in a["name"]]


def stream_outcome(url: str, prompt: str, started: list[str]) -> str:
    """"done" for a stream that ends with [DONE] after every finish reason, else how it broke."""
    body = {"model": "tiny", "prompt": prompt, "max_tokens": 400, "temperature": 0, "stream": True}
    try:
        with httpx.stream("POST", f"{url}/completions", json=body, timeout=60) as response:
            if response.status_code != 200:
                return f"status {response.status_code}"
            finished = False
            for line in response.iter_lines():
                if not line.startswith("data: "):
                    continue
                started.append(prompt)
                payload = line[len("data: "):]
                if payload == "[DONE]":
                    return "done" if finished else "error event"
                event = json.loads(payload)
                if "error" in event:
                    finished = False
                elif event["choices"] and event["choices"][0]["finish_reason"] is not None:
                    finished = True
            return "cut short"
    except httpx.TransportError as err:
        return f"broken: {type(err).__name__}"


class TestTwoReplicas:
    def test_replicas_answer_as_the_local_engine(self, endpoint) -> None:
        url, model_dir = endpoint
        assert httpx.get(f"{url}/models", timeout=30).json()["data"][0]["id"] == "tiny"
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda p: complete(url, p, 24), PROMPTS * 2))
        assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
        texts = [a.json()["choices"][0]["text"] for a in answers]
        assert texts == local_greedy(model_dir, PROMPTS, 24) * 2
        assert len(replica_actors()) == 2
        bad = httpx.post(f"{url}/completions", json={"model": "other", "prompt": "x"}, timeout=30)
        assert bad.status_code == 404 and bad.json()["error"]["code"] == "model_not_found"

    def test_a_replica_lost_mid_request_fails_its_requests_and_the_endpoint_stays_up(self, endpoint) -> None:
        url, model_dir = endpoint
        started: list[str] = []
        prompts = [f"def f{i}(x):\n" for i in range(4)]
        with ThreadPoolExecutor(4) as pool:
            outcomes = [pool.submit(stream_outcome, url, p, started) for p in prompts]
            give_up = time.monotonic() + 60
            while len(set(started)) < 4 and time.monotonic() < give_up:  # every stream has its first event
                time.sleep(0.01)
            victim = replica_actors()[0]
            ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)
            results = [o.result(timeout=90) for o in outcomes]
        # two streams ran on each replica: the lost one's end with an error, the others complete
        assert sorted(r == "done" for r in results) == [False, False, True, True], results
        # the endpoint stays up: the next requests go to the replica left, then to its replacement too
        for _ in range(4):
            answer = complete(url, PROMPTS[0], 16)
            assert answer.status_code == 200, answer.text
            assert answer.json()["choices"][0]["text"] == local_greedy(model_dir, PROMPTS[:1], 16)[0]
        give_up = time.monotonic() + 120
        while (len(replica_actors()) < 2 or victim in replica_actors()) and time.monotonic() < give_up:
            time.sleep(0.5)
        assert len(replica_actors()) == 2 and victim not in replica_actors()


def test_quench_serve_ray_runs_until_sigterm_then_removes_its_replicas(cluster) -> None:
    address, model_dir = cluster
    port = free_port()
    command = [sys.executable, "-m", "quench.cli.main", "--threads", "1", "serve", "--model", str(model_dir),
               "--dtype", "float32", "--prompt-format", "completion", "--batch-size", "4", "--served-model-name", "tiny",
               "--ray", address, "--replicas", "2", "--port", str(port), "--max-model-len", "512"]
    server = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        give_up = time.monotonic() + 180
        while time.monotonic() < give_up and server.poll() is None:
            try:
                if httpx.get(f"{url}/models", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        answer = complete(url, PROMPTS[1], 16)
        assert answer.status_code == 200, answer.text
        assert answer.json()["choices"][0]["text"] == local_greedy(model_dir, PROMPTS[1:2], 16)[0]
        assert len(replica_actors()) == 2
        server.send_signal(signal.SIGTERM)
        assert server.wait(90) == 0, server.stderr.read() if server.stderr else ""
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    give_up = time.monotonic() + 60
    while replica_actors() and time.monotonic() < give_up:
        time.sleep(0.5)
    assert not replica_actors()
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{url}/models", timeout=5)
