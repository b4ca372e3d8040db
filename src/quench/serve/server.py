"""Build the service (the engine in a process of its own, or in a thread) and run it under uvicorn until SIGTERM or SIGINT."""

from __future__ import annotations

import errno
import logging
import socket

import uvicorn

from quench.engine.backend import position_limit
from quench.engine.serving.live import EngineProcess, EngineSpec, LiveEngine
from quench.errors import QuenchError
from quench.models.loading import LoadedModel
from quench.runs.backends import BackendOptions, make_engine
from quench.serve.app import make_app
from quench.serve.served_model import ServedModel
from quench.serve.service import ServeConfig, Service

log = logging.getLogger(__name__)

DEFAULT_MAX_MODEL_LEN = 2048  # tokens per sample (prompt + answer); each batch slot's KV cache holds this many


def check_address(host: str, port: int) -> None:
    """QuenchError if the server could not listen there (checked before the model loads)."""
    if not 0 <= port <= 65535:
        raise QuenchError(f"--port must be in 0..65535, got {port}")
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as err:
        reason = "address already in use" if err.errno == errno.EADDRINUSE else err.strerror or str(err)
        raise QuenchError(f"--host {host} --port {port}: cannot listen there ({reason})") from None


def context_length(loaded: LoadedModel, wanted: int | None) -> int:
    """The served context length: `wanted`, else the default, never past the model's position limit."""
    limit = position_limit(loaded.model)
    if wanted is not None and limit is not None and wanted > limit:
        raise QuenchError(f"--max-model-len {wanted} is past the model's position limit of {limit}")
    chosen = wanted or DEFAULT_MAX_MODEL_LEN
    return min(chosen, limit) if limit is not None else chosen


def build_service(loaded: LoadedModel, options: BackendOptions, config: ServeConfig) -> Service:
    """The engine in a thread of this process (started) and the service over it."""
    backend = make_engine(loaded, options.check())
    engine = LiveEngine(backend, config.max_model_len, config.max_waiting, config.prefill_budget,
                        config.prefill_share).start()
    return Service(engine, loaded.tokenizer, config)


def build_process_service(model: ServedModel, tokenizer, config: ServeConfig, threads: int) -> Service:
    """The engine process (started: its model loaded) and the service over it; QuenchError if it does not start."""
    spec = EngineSpec(model.build, config.max_model_len, config.max_waiting, config.prefill_budget, threads,
                      config.prefill_share)
    return Service(EngineProcess(spec).start(), tokenizer, config)


def make_server(service: Service, host: str, port: int) -> uvicorn.Server:
    """uvicorn over the app: on SIGTERM/SIGINT it stops listening, gives in-flight requests
    `shutdown_timeout` seconds, cancels the rest, then the app's shutdown stops the engine."""
    config = uvicorn.Config(
        make_app(service), host=host, port=port, log_level="warning", access_log=False,
        timeout_graceful_shutdown=service.config.shutdown_timeout, lifespan="on",  # type: ignore[arg-type]
    )
    return uvicorn.Server(config)
