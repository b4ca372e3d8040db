"""What the engine process loads: the model as `quench serve` names it, and how its backend is built (picklable)."""

from __future__ import annotations

from dataclasses import dataclass

from quench.engine.backend import QuenchBackend
from quench.runs.backends import BackendOptions, make_engine


@dataclass(frozen=True)
class ServedModel:
    name: str  # preset name or model path (the engine process shares the server's working directory)
    dtype: str = "auto"
    device: str = "cpu"
    prompt_format: str | None = None
    weights: str = "dequantized"
    options: BackendOptions = BackendOptions()

    def build(self) -> QuenchBackend:
        """Load the model and build quench's engine on it, in the calling process (the engine process's)."""
        from quench.models import load_model

        loaded = load_model(self.name, self.dtype, self.device, self.prompt_format, weights=self.weights)
        backend = make_engine(loaded, self.options.check())
        assert isinstance(backend, QuenchBackend)
        return backend
