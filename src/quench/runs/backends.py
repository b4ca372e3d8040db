"""Pick and build a generation backend from its options."""

from __future__ import annotations

from dataclasses import dataclass, field

from quench.engine.config import EngineConfig
from quench.engine.types import Backend
from quench.errors import QuenchError
from quench.models.loading import LoadedModel

BACKENDS = ("hf", "quench")


@dataclass(frozen=True, kw_only=True)
class BackendOptions:
    """What the CLI (or a Ray actor) needs to build the same backend anywhere; picklable, no tensors."""

    name: str = "quench"  # "quench" (quench's engine) or "hf" (Hugging Face generate, the reference)
    engine: EngineConfig = field(default_factory=EngineConfig)  # the engine's settings; `hf` reads batch_size only
    draft: str = "auto"  # the draft model of a drafter that runs one: "auto" (shipped for the preset) or a path
    guard: str | None = None  # GenGuard early stopping (quench only): "auto" (shipped) or a path

    def check(self) -> "BackendOptions":
        """Self, or QuenchError naming what does not fit together (each engine field is checked by EngineConfig)."""
        if self.name not in BACKENDS:
            raise QuenchError(f"--backend: unknown backend {self.name!r}; choose one of {', '.join(BACKENDS)}")
        if self.name == "hf" and self.engine.drafter != "none":
            raise QuenchError(f"--speculate {self.engine.drafter} needs --backend quench "
                              "(Hugging Face generate is not batched-speculative)")
        if self.name == "hf" and self.guard:
            raise QuenchError("--guard needs --backend quench (the guard reads the engine's hidden states)")
        return self


def make_backend(loaded: LoadedModel, options: BackendOptions = BackendOptions()) -> Backend:
    options.check()
    if options.name == "hf":
        from quench.engine.hf_backend import HFBackend

        return HFBackend(loaded.model, loaded.tokenizer, options.engine.batch_size)
    return make_engine(loaded, options)


def make_engine(loaded: LoadedModel, options: BackendOptions) -> Backend:
    from quench.engine.backend import QuenchBackend

    draft_model = None
    if options.engine.runs_draft_model:
        from quench.models.draft import load_draft

        draft_model = load_draft(options.draft, loaded)
    guard = None
    if options.guard:
        from quench.stopping.loading import load_guard

        guard = load_guard(options.guard, loaded)
    return QuenchBackend(loaded.model, loaded.tokenizer, options.engine, draft_model=draft_model, guard=guard)
