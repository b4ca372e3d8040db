"""The engine: request/result types, quench's batched speculative decoder, its kernels, and the HF reference backend."""

from quench.engine.types import Backend, GenerationRequest, GenerationResult, SamplingParams, cut_at_stop

__all__ = ["Backend", "GenerationRequest", "GenerationResult", "SamplingParams", "cut_at_stop"]
