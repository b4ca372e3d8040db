"""A real `quench serve` app over a tiny model built in the test, served by uvicorn on loopback (tests/serve, tests/runs)."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator


from helpers import char_tokenizer, tiny_llama
from quench.engine.config import EngineConfig
from quench.engine.backend import QuenchBackend
from quench.engine.serving.live import PREFILL_BUDGET, LiveEngine
from quench.serve.server import make_server
from quench.serve.service import ServeConfig, Service

MODEL = "tiny"
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


@dataclass
class Served:
    url: str  # e.g. http://127.0.0.1:41234/v1
    service: Service
    backend: QuenchBackend

    @property
    def engine(self) -> LiveEngine:
        return self.service.engine


def tiny_backend(config: EngineConfig = EngineConfig(batch_size=4)) -> QuenchBackend:
    tokenizer = char_tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATE
    return QuenchBackend(tiny_llama(max_positions=1024), tokenizer, config)


@contextmanager
def serving(backend: QuenchBackend, max_model_len: int = 512, max_waiting: int = 64,
            start_engine: bool = True, model_name: str = MODEL, prefill_budget: int = PREFILL_BUDGET) -> Iterator[Served]:
    """The app on 127.0.0.1 at a free port, in a thread; the engine thread started unless asked not to."""
    engine = LiveEngine(backend, max_model_len, max_waiting, prefill_budget)
    if start_engine:
        engine.start()
    with served_app(engine, backend, max_model_len, max_waiting, model_name) as served:
        yield served


@contextmanager
def served_app(engine, backend: QuenchBackend, max_model_len: int, max_waiting: int,
               model_name: str = MODEL) -> Iterator[Served]:
    """The app over a started `engine` (a thread's or a process's) on 127.0.0.1 at a free port, in a thread;
    the engine stopped when the app is."""
    service = Service(engine, backend.tokenizer, ServeConfig(model_name, max_model_len, max_n=8, max_waiting=max_waiting,
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
