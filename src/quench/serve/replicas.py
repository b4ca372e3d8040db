"""`quench serve --ray`: N engine replicas on a Ray cluster behind one HTTP endpoint (Ray Serve).

Each replica is the single-machine server's app (`make_app`) over its own model and engine thread;
Ray Serve's proxy listens on the endpoint and routes each request to a replica. A replica that dies
fails the requests it held (the proxy answers 5xx, or the stream ends early); requests not yet
routed go to the others, and Ray Serve starts a replacement.

Importing this module imports Ray Serve (the `serve-ray` extra); `quench serve` imports it only for --ray.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, replace
from typing import Any

try:
    from ray import serve
except ImportError as err:  # ray without its serve extra: grpc, aiohttp and others are missing
    raise ImportError(f"quench serve --ray needs Ray Serve: pip install 'quench-code[serve-ray]' ({err})") from err

from quench.distributed.config import ModelSpec, worker_env
from quench.serve.service import ServeConfig

log = logging.getLogger(__name__)

APP_NAME = "quench"  # the Ray Serve application, one per served model on a cluster
CONSTRUCTOR_RETRIES = 3  # a replica that cannot load the model fails `start` after this many tries, not Serve's 20


@dataclass(frozen=True)
class ReplicaOptions:
    """How many replicas, what each one holds, and how deep a replica's queue runs before Serve routes elsewhere."""

    replicas: int = 1
    cpus_per_replica: float = 1.0  # also the replica's torch threads
    gpus_per_replica: float = 0.0
    max_ongoing_requests: int = 16  # per replica; past it the proxy holds requests for a free replica


class EngineReplica:
    """One model, one engine thread and the app over them, inside a Ray Serve replica."""

    def __init__(self, spec: ModelSpec, config: ServeConfig, wanted_len: int | None, threads: int) -> None:
        os.environ.update(worker_env())
        import torch

        from quench.models import load_model
        from quench.serve.server import build_service, context_length

        torch.set_num_threads(max(1, threads))
        loaded = load_model(spec.name, spec.dtype, spec.device, spec.prompt_format)
        self.service = build_service(loaded, spec.backend, replace(config, max_model_len=context_length(loaded, wanted_len)))
        log.info("replica on pid %d serves %s", os.getpid(), config.model_name)

    def __serve_build_asgi_app__(self) -> Any:
        from quench.serve.app import make_app

        return make_app(self.service)

    def __del__(self) -> None:
        service = getattr(self, "service", None)
        if service is not None:
            service.engine.stop(timeout=1.0)


def deployment(spec: ModelSpec, config: ServeConfig, wanted_len: int | None, options: ReplicaOptions):  # -> serve.Application
    """The Ray Serve application: `options.replicas` copies of `EngineReplica`, spread over nodes. Each
    replica sets `config.max_model_len` from `wanted_len` and its loaded model (`server.context_length`)."""
    replica = serve.deployment(
        serve.ingress()(EngineReplica),
        name="engine",
        num_replicas=options.replicas,
        max_ongoing_requests=options.max_ongoing_requests,
        ray_actor_options={"num_cpus": options.cpus_per_replica, "num_gpus": options.gpus_per_replica},
        graceful_shutdown_timeout_s=config.shutdown_timeout,
        max_constructor_retry_count=CONSTRUCTOR_RETRIES,
    )
    return replica.bind(spec.portable(), config, wanted_len, max(1, int(options.cpus_per_replica)))


def start(spec: ModelSpec, config: ServeConfig, wanted_len: int | None, options: ReplicaOptions,
          host: str, port: int) -> None:
    """Start Serve's proxy on host:port (joined cluster) and the replicas; returns once every replica is ready."""
    # one proxy, on the head node: the one endpoint (Serve's default puts one on every node, all on one port)
    serve.start(proxy_location="HeadOnly", http_options={"host": host, "port": port})
    serve.run(deployment(spec, config, wanted_len, options), name=APP_NAME, route_prefix="/", blocking=False)


def stop() -> None:
    """Delete the application; shut Serve down too if no other application runs on the cluster."""
    serve.delete(APP_NAME)
    if not serve.status().applications:
        serve.shutdown()


def run_until_signalled(stop_event: threading.Event) -> None:
    """Block until `stop_event` is set (by the CLI's SIGTERM/SIGINT handler), then stop the application."""
    try:
        while not stop_event.wait(1.0):
            pass
    finally:
        stop()
