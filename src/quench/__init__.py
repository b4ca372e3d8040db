"""quench: fast, robust evaluation and training of code-generation LLMs.

The names a Python user needs, imported on first use (so that `import quench` and `quench --help` load no
torch): a model and a benchmark, the engine with its config and request types, and the functions behind
`quench generate`, `evaluate` and `robustness`. README.md has an example.
"""

import importlib
import logging

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())

_EXPORTS = {  # name -> the module that defines it
    "load_model": "quench.models", "LoadedModel": "quench.models", "encode_prompt": "quench.models",
    "format_prompt": "quench.models",
    "load_benchmark": "quench.datasets", "Problem": "quench.datasets",
    "QuenchBackend": "quench.engine.backend", "EngineConfig": "quench.engine", "SamplingParams": "quench.engine",
    "GenerationRequest": "quench.engine", "GenerationResult": "quench.engine",
    "BackendOptions": "quench.runs.backends", "make_backend": "quench.runs.backends",
    "GenerateConfig": "quench.runs.samples", "generate_samples": "quench.runs.samples",
    "SampleRecord": "quench.runs.records", "ResultRecord": "quench.runs.records",
    "execute_samples": "quench.runs.evaluate", "summarize": "quench.runs.evaluate",
    "SandboxLimits": "quench.execution", "SandboxPool": "quench.execution",
    "RobustnessConfig": "quench.robustness.pipeline", "run_robustness": "quench.robustness.pipeline",
    "QuenchError": "quench.errors",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'quench' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # the next lookup does not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
