"""Pick and build a generation backend from its options."""

from __future__ import annotations

from dataclasses import dataclass

from quench.errors import QuenchError
from quench.engine.types import Backend
from quench.models.loading import LoadedModel

BACKENDS = ("hf", "quench")
SPECULATE = ("none", "ngram", "draft", "hybrid")
DRAFTERS = {"none": "none", "ngram": "ngram", "draft": "model", "hybrid": "hybrid"}  # --speculate -> EngineConfig.drafter
DRAFT_LENGTHS = ("bass", "fixed")


@dataclass(frozen=True)
class BackendOptions:
    """What the CLI (or a Ray actor) needs to build the same backend anywhere; picklable, no tensors."""

    name: str = "quench"  # "quench" (quench's engine) or "hf" (Hugging Face generate, the reference)
    batch_size: int = 8  # sequences decoded together
    speculate: str = "none"  # quench only: "none", "ngram" (prompt lookup), "draft" (a draft model) or
    # "hybrid" (per row: prompt lookup where it finds a match, else the draft model)
    draft: str = "auto"  # the draft model for "draft"/"hybrid": "auto" (shipped for the preset) or a path
    draft_tokens: int = 7  # fixed draft length, or where BASS's dynamic length starts
    draft_length: str = "bass"  # "bass" (dynamic, per batch) or "fixed"
    guard: str | None = None  # GenGuard early stopping (quench only): "auto" (shipped) or a path
    draft_confidence: float | None = None  # draft model: a row's draft ends before a token it gives less
    # (None: by batch size, see EngineConfig)
    draft_stop: float | None = None  # draft model: ... or once the product of its tokens' draft probabilities
    # falls below this (None: by batch size, see EngineConfig)
    draft_max_rows: int | None = None  # speculation pauses while more rows than this are live (0: never; None: 8)

    def check(self) -> "BackendOptions":
        """Self, or QuenchError naming the flag that is wrong."""
        if self.name not in BACKENDS:
            raise QuenchError(f"--backend: unknown backend {self.name!r}; choose one of {', '.join(BACKENDS)}")
        if self.batch_size < 1:
            raise QuenchError(f"--batch-size must be at least 1, got {self.batch_size}")
        if self.speculate not in SPECULATE:
            raise QuenchError(f"--speculate: choose one of {', '.join(SPECULATE)}, got {self.speculate!r}")
        if self.draft_length not in DRAFT_LENGTHS:
            raise QuenchError(f"--draft-length: choose one of {', '.join(DRAFT_LENGTHS)}, got {self.draft_length!r}")
        if not 1 <= self.draft_tokens <= 32:
            raise QuenchError(f"--draft-tokens must be between 1 and 32, got {self.draft_tokens}")
        if self.draft_confidence is not None and not 0.0 <= self.draft_confidence < 1.0:
            raise QuenchError(f"--draft-confidence must be in [0, 1), got {self.draft_confidence}")
        if self.draft_stop is not None and not 0.0 <= self.draft_stop < 1.0:
            raise QuenchError(f"--draft-stop must be in [0, 1), got {self.draft_stop}")
        if self.draft_max_rows is not None and self.draft_max_rows < 0:
            raise QuenchError(f"--draft-max-rows must be >= 0 (0: never pause), got {self.draft_max_rows}")
        if self.name == "hf" and self.speculate != "none":
            raise QuenchError(f"--speculate {self.speculate} needs --backend quench (Hugging Face generate is not batched-speculative)")
        if self.name == "hf" and self.guard:
            raise QuenchError("--guard needs --backend quench (the guard reads the engine's hidden states)")
        return self


def make_backend(loaded: LoadedModel, options: BackendOptions = BackendOptions()) -> Backend:
    options.check()
    if options.name == "hf":
        from quench.engine.hf_backend import HFBackend

        return HFBackend(loaded.model, loaded.tokenizer, options.batch_size)
    return make_engine(loaded, options)


def make_engine(loaded: LoadedModel, options: BackendOptions) -> Backend:
    from quench.engine.engine import EngineConfig, QuenchBackend

    drafter = DRAFTERS[options.speculate]
    config = EngineConfig(batch_size=options.batch_size, drafter=drafter, draft_length=options.draft_length,
                          draft_tokens=options.draft_tokens, draft_confidence=options.draft_confidence,
                          draft_stop=options.draft_stop, draft_max_rows=options.draft_max_rows)
    draft_model = None
    if options.speculate in ("draft", "hybrid"):
        from quench.models.draft import load_draft

        draft_model = load_draft(options.draft, loaded)
    guard = None
    if options.guard:
        from quench.stopping.loading import load_guard

        guard = load_guard(options.guard, loaded)
    return QuenchBackend(loaded.model, loaded.tokenizer, config, draft_model=draft_model, guard=guard)
