"""The module-wide served tiny model of the serve tests, and servers whose engine loop runs in its own process."""

from __future__ import annotations

from contextlib import contextmanager
from functools import partial
from typing import Callable, Iterator

import pytest
import torch

from helpers import torch_threads
from live_server import Served, served_app, serving, tiny_backend
from quench.engine.config import EngineConfig
from quench.engine.serving.live import PREFILL_BUDGET, EngineProcess, EngineSpec


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
    with served_app(EngineProcess(spec).start(), backend, max_model_len, max_waiting) as served:
        yield served


@pytest.fixture(scope="session")
def process_server() -> Callable[..., contextmanager]:
    """`serving_process`, for tests that start their own server with an engine process."""
    return serving_process


@pytest.fixture(scope="module")
def in_process() -> Iterator[Served]:
    """A server over the tiny model (batch 4) whose engine loop runs in its own process."""
    with serving_process() as running:
        yield running
