"""The module-wide served tiny model of the serve tests, and servers whose engine loop runs in its own process."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from functools import partial
from typing import Callable, Iterator

import pytest
import torch

from helpers import torch_threads
from live_server import MODEL, Served, serving, tiny_backend
from quench.engine.config import EngineConfig
from quench.engine.serving.live import PREFILL_BUDGET, EngineProcess, EngineSpec
from quench.serve.server import make_server
from quench.serve.service import ServeConfig, Service


@pytest.fixture(autouse=True)
def one_thread():
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models run fastest on one thread
    with serving(tiny_backend()) as running:
        yield running
    torch.set_num_threads(before)


@contextmanager
def serving_process(config: EngineConfig = EngineConfig(batch_size=4), max_model_len: int = 512, max_waiting: int = 64,
                    prefill_budget: int = PREFILL_BUDGET) -> Iterator[Served]:
    """The app on 127.0.0.1 at a free port, in a thread; its engine process started (one torch thread).
    `Served.backend` is a copy of the engine's backend in this process (its tokenizer; answers served alone)."""
    backend = tiny_backend(config)
    spec = EngineSpec(partial(tiny_backend, config), max_model_len, max_waiting, prefill_budget, threads=1)
    engine = EngineProcess(spec).start()
    service = Service(engine, backend.tokenizer, ServeConfig(MODEL, max_model_len, max_n=8, max_waiting=max_waiting,
                                                            shutdown_timeout=2))
    server = make_server(service, "127.0.0.1", 0)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield Served(f"http://127.0.0.1:{port}/v1", service, backend)
    finally:
        server.should_exit = True
        thread.join(30)
        engine.stop()


@pytest.fixture(scope="session")
def process_server() -> Callable[..., contextmanager]:
    """`serving_process`, for tests that start their own server with an engine process."""
    return serving_process


@pytest.fixture(scope="module")
def in_process() -> Iterator[Served]:
    """A server over the tiny model (batch 4) whose engine loop runs in its own process."""
    with serving_process() as running:
        yield running
