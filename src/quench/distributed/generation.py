"""`RayBackend`: the `Backend` protocol over N Ray actors, each with its own model and engine.

Actors are built from a `ModelSpec` (each loads the model itself, one per GPU or per group of
CPUs) and fed chunks of samples; results reach the driver as chunks finish. Only the driver
writes files, so resume and "nothing twice" behave as on one machine; a sample is yielded once
even if its chunk ran twice because a node was lost.
"""

from __future__ import annotations

import logging
import os
from types import TracebackType
from typing import Iterable, Iterator

import ray

from quench.distributed.chunks import IndexedRequest, balanced_size, generation_chunks, layout
from quench.distributed.cluster import fleet_size, node_id
from quench.distributed.config import ModelSpec, RayOptions, worker_env
from quench.distributed.dispatch import DispatchStats, Fleet, dispatch
from quench.engine.types import GenerationRequest, GenerationResult, SamplingParams

log = logging.getLogger(__name__)


@ray.remote(max_restarts=0)
class GenerationWorker:
    """One model and engine on one node; runs one chunk at a time."""

    def __init__(self, spec: ModelSpec, env: dict[str, str]) -> None:
        os.environ.update(env)
        self.backend = spec.build()

    def ready(self) -> dict[str, object]:
        return {"node": node_id(), "pid": os.getpid(), "backend": self.backend.name}

    def generate(self, chunk: list[IndexedRequest], sampling: SamplingParams) -> list[GenerationResult]:
        return list(self.backend.generate(layout(chunk), sampling))


class RayBackend:
    """Generation spread over Ray actors; `generate` yields samples as chunks finish (unordered)."""

    def __init__(self, spec: ModelSpec, options: RayOptions = RayOptions()) -> None:
        self.spec = spec.portable()
        self.options = options
        self.name = f"ray-{spec.backend.name}"
        gpus = options.gpus_per_actor if options.gpus_per_actor is not None else (1.0 if spec.device.startswith("cuda") else 0.0)
        self._resources = {"num_cpus": options.cpus_per_actor, "num_gpus": gpus}
        self.fleet = Fleet(self._new_actor, fleet_size(options.num_actors, options.cpus_per_actor, gpus), options)

    @property
    def stats(self) -> DispatchStats:
        return self.fleet.stats

    def _new_actor(self):  # -> ray ActorHandle
        # SPREAD: actors on different nodes, so one lost node takes as few of them as possible.
        return GenerationWorker.options(**self._resources, scheduling_strategy="SPREAD").remote(self.spec, worker_env())

    def start(self, wait_for: int = 0) -> None:
        """Start the actors (each loads the model, in parallel); block until `wait_for` are ready."""
        self.fleet.start()
        if wait_for:
            self.fleet.wait_ready(wait_for)

    def generate(self, requests: Iterable[GenerationRequest], sampling: SamplingParams) -> Iterator[GenerationResult]:
        requests = list(requests)
        total = sum(request.n for request in requests)
        preferred = self.options.chunk_size or 2 * self.spec.backend.engine.batch_size
        size = balanced_size(total, self.fleet.size, preferred, self.options.inflight_per_actor)
        seen: set[tuple[str, int]] = set()
        timeout = self.options.chunk_timeout_s
        chunks = generation_chunks(requests, size)
        for _, results in dispatch(self.fleet, chunks, lambda actor, chunk: actor.generate.remote(chunk, sampling), lambda _: timeout):
            for result in results:
                if (result.key, result.sample_index) in seen:
                    self.stats.duplicates_dropped += 1
                    continue
                seen.add((result.key, result.sample_index))
                yield result

    def close(self) -> None:
        """Kill the actors (and free their CPUs/GPUs for what runs next)."""
        self.fleet.close()

    def __enter__(self) -> "RayBackend":
        self.start(wait_for=1)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
