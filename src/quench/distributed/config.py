"""Settings of a Ray run: which model the actors load, and how work is spread and retried.

Nothing here imports Ray: the CLI builds these from flags before deciding to start anything.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from quench.runs.backends import BackendOptions


@dataclass(frozen=True)
class ModelSpec:
    """Everything a generation actor needs to build its own model and engine (picklable, no tensors)."""

    name: str  # preset name, or a model path that exists at the same place on every node
    dtype: str = "auto"
    device: str = "cpu"  # "cuda" inside an actor that holds a GPU
    prompt_format: str | None = None
    backend: BackendOptions = BackendOptions()  # which backend each actor builds, and how
    weights: str = "dequantized"  # a GGUF model's weights as `load_model` takes them (the mode the run resolved)

    def build(self):  # -> Backend
        """Load the model and build its backend in this process (a Ray actor's or an engine process's)."""
        from quench.models import load_model
        from quench.runs.backends import make_backend

        loaded = load_model(self.name, self.dtype, self.device, self.prompt_format, weights=self.weights)
        return make_backend(loaded, self.backend)

    def portable(self) -> "ModelSpec":
        """The same spec with a relative model path made absolute, so other processes find it."""
        path = Path(self.name).expanduser()
        if path.exists():
            return replace(self, name=str(path.resolve()))
        return self


@dataclass(frozen=True)
class RayOptions:
    """How many actors, their resources, how work is cut, and when a worker is presumed lost."""

    num_actors: int | None = None  # None: as many as the cluster's resources allow
    cpus_per_actor: float = 1.0  # generation: torch threads per actor; execution: sandbox workers per actor
    gpus_per_actor: float | None = None  # None: 1 when the model's device is cuda, else 0
    chunk_size: int | None = None  # samples (generation) or programs (execution) per Ray call; None: default
    inflight_per_actor: int = 2  # queued calls per actor, so an actor never idles between two chunks
    max_attempts: int = 3  # tries per chunk before the run fails (a chunk that kills every actor)
    max_replacements: int | None = None  # actors started to replace lost ones; None: 2 x num_actors
    start_timeout_s: float = 600.0  # to load the model, or to find resources for at least one actor
    chunk_timeout_s: float = 3600.0  # one chunk; past it the actor is presumed hung, killed, its work requeued
    poll_s: float = 1.0  # longest single ray.wait; deadlines are checked between waits

    def __post_init__(self) -> None:
        if self.num_actors is not None and self.num_actors < 1:
            raise ValueError(f"num_actors must be at least 1, got {self.num_actors}")
        if self.cpus_per_actor <= 0:
            raise ValueError(f"cpus_per_actor must be positive, got {self.cpus_per_actor}")
        if self.gpus_per_actor is not None and self.gpus_per_actor < 0:
            raise ValueError(f"gpus_per_actor must be >= 0, got {self.gpus_per_actor}")
        if self.chunk_size is not None and self.chunk_size < 1:
            raise ValueError(f"chunk_size must be at least 1, got {self.chunk_size}")
        for name in ("inflight_per_actor", "max_attempts"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("start_timeout_s", "chunk_timeout_s", "poll_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")


def worker_env() -> dict[str, str]:
    """Environment for Ray workers: never reach a model hub from a node."""
    return {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **_passthrough("QUENCH_CACHE")}


def _passthrough(*names: str) -> dict[str, str]:
    return {name: os.environ[name] for name in names if name in os.environ}
