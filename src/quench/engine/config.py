"""The engine's configuration: one frozen dataclass, every field resolved and checked when it is built.

Each default is defined here once. Three drafting settings depend on the batch size
(`drafting_defaults`) and the draft length on the drafter; a field left `None` takes that value in
`__post_init__`, so a built config never holds `None` for them. Every bad value raises `ConfigError` naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from quench.engine.kernels.native_config import KernelConfig
from quench.errors import QuenchError

DRAFTERS = ("none", "ngram", "draft", "hybrid")
DRAFT_MODEL_DRAFTERS = ("draft", "hybrid")  # the drafters that run a draft model
DRAFT_LENGTHS = ("bass", "fixed", "measured")
MAX_LOOP_TOKENS = 15  # with the pending token, 16 per row: what the native decode kernel serves (llama.NATIVE_MAX_NEW)
DTYPES = ("auto", "bfloat16", "float16", "float32", "float64")
KV_CACHES = ("auto", "float32", "bfloat16")  # the KV caches' dtypes (`kv_cache`)


class ConfigError(QuenchError, ValueError):
    """A configuration value out of range; `field` names it (the CLI names the matching flag)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field} {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True)
class DraftingDefaults:
    """The cost-aware drafting settings of one batch size (figures in docs/draft.md)."""

    draft_stop: float
    min_model_draft: int
    row_copy_lengths: bool


def drafting_defaults(batch_size: int) -> DraftingDefaults:
    """What `EngineConfig` fills in for the drafting fields a caller leaves `None` (the paired rounds that
    chose them: docs/draft.md, "Why these defaults").

    draft_stop: a model draft ends where the product of its tokens' draft probabilities falls below it; the
    bar is higher above batch 1, where verifying a drafted token costs more.
    min_model_draft: a floor of 2 tokens per model draft pays at batch 1, where a drafted token costs little
    to verify, and loses above it.
    row_copy_lengths: per-row copy caps pay above batch 1, where every drafted token is verified.
    """
    if batch_size == 1:
        return DraftingDefaults(draft_stop=0.15, min_model_draft=2, row_copy_lengths=False)
    return DraftingDefaults(draft_stop=0.4, min_model_draft=1, row_copy_lengths=True)


@dataclass(frozen=True)
class EngineConfig:
    """How `QuenchBackend` decodes. `dataclasses.replace` keeps resolved drafting fields: to get another
    batch size's defaults, build a new config instead."""

    batch_size: int = 8  # slots decoded together; finished slots are refilled at once
    drafter: str = "none"  # "none" (regular), "ngram" (prompt lookup), "draft" (a draft model) or
    # "hybrid" (per row: prompt lookup where the row's last n-gram occurred before, else the draft model)
    draft_length: str | None = None  # "bass" (dynamic, BASS Algorithm 1), "measured" (the length that measured step
    # times and acceptance say pays most, 0 included) or "fixed"; None: measured for prompt lookup, bass with a draft
    # model (whose `draft_stop` ends a draft where the draft model is unsure)
    draft_tokens: int = 7  # the fixed length, or where a dynamic length starts (the BASS paper uses 7)
    max_draft_tokens: int = 32  # the dynamic lengths' upper bound
    ngram_max: int = 3  # prompt lookup: longest suffix n-gram tried
    ngram_min: int = 2  # ... and the shortest: 1-token matches are accepted far less often (docs/engine.md)
    draft_loop_tokens: int = 8  # prompt lookup: a row whose output is in a repetition loop drafts this many tokens
    # of the loop's continuation, whatever the draft length (0: off; at most MAX_LOOP_TOKENS). Lossless; it pays where
    # a step is bound by reading the weights, small batches (docs/benchmarks.md, loop drafting)
    dtype: str = "auto"  # "auto" keeps the model's dtype; else the model is converted in place
    fast_path: bool = True  # hand-written forward for Llama-family models; False = generic HF path
    prepack: bool = True  # pre-pack weights for oneDNN (CPU, bf16/fp32) on the fast path
    native_attention: bool = True  # the C decode-attention kernel (native.py) where a C compiler exists
    compile: bool = False  # torch.compile the fast path's PyTorch forward (no prepack, no native kernel), off
    # because the default path runs faster and needs no compile time (docs/engine.md)
    max_len: int | None = None  # a fixed KV cache length per slot; None sizes the cache for each call
    # (longest prompt + max_new_tokens + drafts), which no config can know in advance
    # Cost-aware drafting: each drafted token costs a draft forward and verification work, so a model
    # draft runs while the draft model is sure enough of it.
    draft_confidence: float = 0.0  # draft model: a row's draft ends before a token it gives less (0: never)
    draft_stop: float | None = None  # draft model: past the floor, a row's draft ends before the token at which
    # the product of the draft's probabilities of its tokens falls below this (0: never; None: by batch size)
    min_model_draft: int | None = None  # the shortest model draft a row gets (None: by batch size)
    row_copy_lengths: bool | None = None  # hybrid: cap each row's copies by what the target kept of its last
    # one (None: by batch size)
    draft_int8: bool = True  # the draft model's products of a few rows from int8 weight copies where the CPU
    # has AMX int8 (half the bytes; the target verifies, so output is unchanged; docs/draft.md)
    draft_max_rows: int = 8  # speculation pauses (regular steps) while more rows than this are live (0: never
    # pauses). Past 8 rows a step's drafts cost more than they save (docs/engine.md, Pausing); vLLM's
    # speculative_disable_by_batch_size does the same.
    draft_sampled: bool = True  # steps of sampled rows draft too (speculative sampling: lossless in distribution, but
    # its acceptance test runs in PyTorch's arithmetic order, so a sampled answer can differ between CPUs); False: only
    # steps whose rows are greedy draft, and sampled rows draw as regular decoding does (`quench serve`'s auto)
    share_prefixes: bool = True  # a prompt starting like a recent one copies those positions' keys/values
    # (where the runner promises the same bits as a whole prefill: see scheduler.PrefixStore)
    batch_invariant: bool | None = None  # the target's every step through kernels whose per-row sums do not depend
    # on the row count, the other rows or the threads (quench.engine.kernels.invariant; Llama fast path, float32/bfloat16):
    # greedy output is the same at every batch size, position and speculation setting (docs/engine.md). None (the
    # default): on wherever those kernels serve the model, else off with a warning; True: on, a ConfigError where
    # they cannot serve it; False: off (the fastest kernels whatever their order)
    kv_cache: str = "auto"  # the KV caches' dtype. "bfloat16" under a float32 model: half the bytes an attention step
    # reads, keys and values rounded as they are written; batch-invariant runners only. "auto": bfloat16 under a
    # GGUF's blocks wherever served, else the model's dtype; "float32": float32 (runners.forward_plan.kv_cache_dtype)
    kernels: KernelConfig = field(default_factory=KernelConfig.from_env)  # AMX tiles and the screened greedy
    # head where the CPU serves them (QUENCH_AMX=0 / QUENCH_SCREEN=0 turn them off; `quench doctor` reports them)

    def __post_init__(self) -> None:
        self._check()
        defaults = drafting_defaults(self.batch_size)
        for name in ("draft_stop", "min_model_draft", "row_copy_lengths"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, getattr(defaults, name))  # frozen: resolved once, here
        if self.draft_length is None:
            object.__setattr__(self, "draft_length", "bass" if self.runs_draft_model else "measured")
        self._check_drafting()

    @property
    def row_headroom(self) -> int:
        """KV positions a row needs beyond its prompt and new tokens: a step's drafts and the pending token."""
        return self.max_draft_tokens + 2

    @property
    def runs_draft_model(self) -> bool:
        """Whether this drafter needs a draft model."""
        return self.drafter in DRAFT_MODEL_DRAFTERS

    def _check(self) -> None:
        if self.batch_size < 1:
            raise ConfigError("batch_size", f"must be at least 1, got {self.batch_size}")
        if self.drafter not in DRAFTERS:
            raise ConfigError("drafter", f"must be one of {', '.join(DRAFTERS)}, got {self.drafter!r}")
        if self.draft_length is not None and self.draft_length not in DRAFT_LENGTHS:
            raise ConfigError("draft_length", f"must be one of {', '.join(DRAFT_LENGTHS)}, got {self.draft_length!r}")
        if self.max_draft_tokens < 1:
            raise ConfigError("max_draft_tokens", f"must be at least 1, got {self.max_draft_tokens}")
        if not 1 <= self.draft_tokens <= self.max_draft_tokens:
            raise ConfigError("draft_tokens", f"must be between 1 and {self.max_draft_tokens}, got {self.draft_tokens}")
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise ConfigError("ngram_min", f"must be between 1 and ngram_max ({self.ngram_max}), got {self.ngram_min}")
        if self.kv_cache not in KV_CACHES:
            raise ConfigError("kv_cache", f"must be one of {', '.join(KV_CACHES)}, got {self.kv_cache!r}")
        if self.dtype not in DTYPES:
            raise ConfigError("dtype", f"must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.max_len is not None and self.max_len < 1:
            raise ConfigError("max_len", f"must be at least 1, got {self.max_len}")
        most_loop_tokens = min(MAX_LOOP_TOKENS, self.max_draft_tokens)
        if not 0 <= self.draft_loop_tokens <= most_loop_tokens:
            raise ConfigError("draft_loop_tokens", f"must be between 0 and {most_loop_tokens}, got {self.draft_loop_tokens}")
        if self.draft_max_rows < 0:
            raise ConfigError("draft_max_rows", f"must be >= 0 (0: never pause), got {self.draft_max_rows}")

    def _check_drafting(self) -> None:
        for name in ("draft_confidence", "draft_stop"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(name, f"must be in [0, 1), got {getattr(self, name)}")
        if self.min_model_draft < 1:
            raise ConfigError("min_model_draft", f"must be at least 1, got {self.min_model_draft}")
