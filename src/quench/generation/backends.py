"""Pick a generation backend by name."""

from __future__ import annotations

from quench.errors import QuenchError
from quench.generation.types import Backend
from quench.models.loading import LoadedModel

BACKENDS = ("hf", "quench")


def make_backend(name: str, loaded: LoadedModel, batch_size: int) -> Backend:
    if batch_size < 1:
        raise QuenchError(f"--batch-size must be at least 1, got {batch_size}")
    if name == "hf":
        from quench.generation.hf_backend import HFBackend

        return HFBackend(loaded.model, loaded.tokenizer, batch_size)
    if name == "quench":
        from quench.generation.engine import EngineConfig, QuenchBackend

        return QuenchBackend(loaded.model, loaded.tokenizer, EngineConfig(batch_size=batch_size))
    raise QuenchError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
