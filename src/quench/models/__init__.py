"""Models: presets (the embedded default), HF directories, GGUF files; prompt formats."""

from quench.models.loading import LoadedModel, cache_root, load_model, resolve_dtype
from quench.models.presets import DEFAULT_PRESET, PRESETS
from quench.models.prompts import encode_prompt, format_prompt

__all__ = [
    "DEFAULT_PRESET", "PRESETS", "LoadedModel", "cache_root", "encode_prompt", "format_prompt",
    "load_model", "resolve_dtype",
]
