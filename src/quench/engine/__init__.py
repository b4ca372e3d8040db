"""The engine: request/result types, quench's batched speculative decoder, its kernels, and the HF reference backend."""

from quench.engine.config import ConfigError, EngineConfig
from quench.engine.observers import LoopListener, RowStopper, StopObserver
from quench.engine.types import Backend, GenerationRequest, GenerationResult, SamplingParams, cut_at_stop

__all__ = [
    "Backend", "ConfigError", "EngineConfig", "GenerationRequest", "GenerationResult", "LoopListener", "RowStopper",
    "SamplingParams", "StopObserver", "cut_at_stop",
]
