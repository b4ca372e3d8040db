"""Generation: request/result types, the reference HF backend and quench's own engine."""

from quench.generation.types import Backend, GenerationRequest, GenerationResult, SamplingParams, cut_at_stop

__all__ = ["Backend", "GenerationRequest", "GenerationResult", "SamplingParams", "cut_at_stop"]
