"""quench's own generation engine: batched, ragged, continuous, optionally speculative (BASS)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import torch

from quench.errors import QuenchError
from quench.engine.decode import DecodeLoop, LoopStats
from quench.engine.draft_length import make_policy
from quench.engine.drafters import Drafter, HybridDrafter, ModelDrafter, NgramDrafter
from quench.engine.hf_runner import HFRunner
from quench.engine.kv_cache import KVCache, round_up
from quench.engine.llama import LlamaRunner, is_llama
from quench.engine.native_config import KernelConfig
from quench.engine.observers import StopObserver
from quench.engine.rows import StopRules, eos_token_ids
from quench.engine.scheduler import Runner, WorkQueue
from quench.engine.types import GenerationRequest, GenerationResult, SamplingParams, StopHook
from quench.engine.verify import HeadColumns
from quench.models.draft import SubsetHead

log = logging.getLogger(__name__)

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32, "float64": torch.float64}


DRAFTERS = ("none", "ngram", "model", "hybrid")
MODEL_DRAFTERS = ("model", "hybrid")  # the drafters that run a draft model


@dataclass(frozen=True)
class EngineConfig:
    batch_size: int = 8  # slots decoded together; finished slots are refilled at once
    drafter: str = "none"  # "none" (regular), "ngram" (prompt lookup), "model" (needs draft_model) or
    # "hybrid" (per row: prompt lookup where the row's last n-gram occurred before, else draft_model)
    draft_length: str = "bass"  # "bass" (dynamic, BASS Algorithm 1) or "fixed"
    draft_tokens: int = 7  # the fixed length, or where BASS starts (the paper uses 7)
    max_draft_tokens: int = 32  # BASS's upper bound
    ngram_max: int = 3  # prompt lookup: longest suffix n-gram tried
    ngram_min: int = 2  # ... and the shortest (1-token matches: ~22% accepted vs ~39% from 2+ on HumanEval)
    dtype: str = "auto"  # "auto" keeps the model's dtype; else the model is converted in place
    fast_path: bool = True  # hand-written forward for Llama-family models; False = generic HF path
    prepack: bool = True  # pre-pack weights for oneDNN (CPU, bf16/fp32) on the fast path
    native_attention: bool = True  # the C decode-attention kernel (native.py) where a C compiler exists
    compile: bool = False  # torch.compile the fast path's PyTorch forward (no prepack, no native kernel;
    # measured 1.6-1.8x slower than the default here, after a ~2 minute compile — see docs/engine.md)
    max_len: int | None = None  # KV cache length per slot; None = longest prompt + max_new_tokens + drafts
    # Cost-aware drafting; None = by batch size (measured in docs/draft.md): each drafted token costs a draft
    # forward and verification work, so a model draft runs while the draft model is sure enough of it.
    draft_confidence: float | None = None  # draft model: a row's draft ends before a token it gives less (None: 0)
    row_copy_lengths: bool | None = None  # hybrid: cap each row's copies by what the target kept of its last one
    min_model_draft: int | None = None  # hybrid: the shortest model draft a row gets (None: 2 at batch 1, else 1)
    draft_stop: float | None = None  # draft model: past that floor, a row's draft ends before the token at which
    # the product of the draft's probabilities of its tokens falls below this (0: never; None: 0.15 at batch 1,
    # 0.4 above, where verifying a token costs more)
    draft_int8: bool = True  # the draft model's products of a few rows from int8 weight copies where the CPU
    # has AMX int8 (half the bytes; the target verifies, so output is unchanged; docs/draft.md)
    draft_max_rows: int | None = None  # speculation pauses (regular steps) while more rows than this are live
    # (0: never pauses; None: 8, see AUTO_DRAFT_MAX_ROWS); a paused model draft catches up when it resumes
    share_prefixes: bool = True  # a prompt starting like a recent one copies those positions' keys/values
    # (where the runner promises the same bits as a whole prefill: see scheduler.PrefixStore)
    kernels: KernelConfig = field(default_factory=KernelConfig.from_env)  # AMX tiles and the screened greedy
    # head where the CPU serves them (QUENCH_AMX=0 / QUENCH_SCREEN=0 turn them off; `quench doctor` reports them)

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.drafter not in DRAFTERS:
            raise ValueError(f"drafter must be one of {', '.join(DRAFTERS)}, got {self.drafter!r}")
        if self.draft_length not in ("bass", "fixed"):
            raise ValueError(f"draft_length must be 'bass' or 'fixed', got {self.draft_length!r}")
        if not 1 <= self.draft_tokens <= self.max_draft_tokens:
            raise ValueError("need 1 <= draft_tokens <= max_draft_tokens")
        if self.draft_confidence is not None and not 0.0 <= self.draft_confidence < 1.0:
            raise ValueError(f"draft_confidence must be in [0, 1), got {self.draft_confidence}")
        if self.draft_stop is not None and not 0.0 <= self.draft_stop < 1.0:
            raise ValueError(f"draft_stop must be in [0, 1), got {self.draft_stop}")
        if self.draft_max_rows is not None and self.draft_max_rows < 0:
            raise ValueError(f"draft_max_rows must be >= 0, got {self.draft_max_rows}")
        if self.min_model_draft is not None and self.min_model_draft < 1:
            raise ValueError(f"min_model_draft must be >= 1, got {self.min_model_draft}")
        if self.dtype != "auto" and self.dtype not in _DTYPES:
            raise ValueError(f"dtype must be 'auto' or one of {sorted(_DTYPES)}, got {self.dtype!r}")

    @property
    def confidence(self) -> float:
        """The draft-confidence cut in force (see `draft_confidence`)."""
        return self.draft_confidence if self.draft_confidence is not None else 0.0

    @property
    def stop(self) -> float:
        """The cumulative-probability stop in force (see `draft_stop`)."""
        if self.draft_stop is not None:
            return self.draft_stop
        return AUTO_DRAFT_STOP_BATCH1 if self.batch_size == 1 else AUTO_DRAFT_STOP

    @property
    def speculative_rows(self) -> int | None:
        """The most live rows a step drafts for (None: no limit; see `draft_max_rows`)."""
        rows = self.draft_max_rows if self.draft_max_rows is not None else AUTO_DRAFT_MAX_ROWS
        return rows or None

    @property
    def model_draft_floor(self) -> int:
        """The shortest model draft a hybrid row gets (see `min_model_draft`)."""
        if self.min_model_draft is not None:
            return self.min_model_draft
        return AUTO_BATCH1_MODEL_DRAFT if self.batch_size == 1 else 1

    @property
    def copy_caps(self) -> bool:
        """Whether hybrid drafting caps copies per row (see `row_copy_lengths`)."""
        return self.row_copy_lengths if self.row_copy_lengths is not None else self.batch_size > 1


# A model draft ends where the product of its tokens' draft probabilities falls below the stop. Against a
# per-token cut (end before any token under 0.4) it won every paired round (hybrid, int8 draft, one process):
# batch 8 greedy 1.25/1.18/1.14x regular against 1.11/1.13/1.13x, sampling 1.19/1.62x against 1.16/1.45x;
# batch 1 (stop 0.15 against no rule) greedy 1.59/1.68/1.67x against 1.53/1.61/1.62x, sampling 1.87/1.76x
# against 1.53/1.71x. So the per-token cut is off unless asked for.
AUTO_DRAFT_STOP = 0.4
AUTO_DRAFT_STOP_BATCH1 = 0.15
# Batch 1 greedy, hybrid, two interleaved rounds: a floor of 2 tokens per model draft gave 1.05-1.09x the
# speed of a floor of 1 (2.10 vs 2.04 tokens per step): a drafted token costs little to verify there.
AUTO_BATCH1_MODEL_DRAFT = 2
# Hybrid against regular with drafts at every batch size (engine defaults, 192 tokens): batch 8 1.27-1.31x
# (round medians), batch 16 greedy 0.99x and sampling 0.72x: past 8 rows a step's drafts cost more than they
# save (vLLM's speculative_disable_by_batch_size does the same). A batch decodes regular steps while more than
# 8 rows are live.
AUTO_DRAFT_MAX_ROWS = 8


def make_runner(model: torch.nn.Module, config: EngineConfig, int8: bool = False) -> Runner:
    """The Llama fast path when it applies (and is enabled), else the generic Hugging Face path.
    int8: int8 weight copies for products of a few rows (draft models; `LlamaRunner`)."""
    if config.dtype != "auto":
        model.to(_DTYPES[config.dtype])
    model.eval()
    if config.fast_path and is_llama(model):
        return LlamaRunner(
            model,
            prepack=config.prepack and not config.compile,
            compile=config.compile,
            native_attention=config.native_attention and not config.compile,
            int8=int8,
            kernels=config.kernels,
        )
    return HFRunner(model)


def make_draft_runner(draft_model: torch.nn.Module, config: EngineConfig) -> tuple[Runner, HeadColumns | None]:
    """The runner of a draft model, and the vocabulary of its logits where it is not the whole one.

    The fast path reads `lm_head.weight`, so for a draft with a `SubsetHead` (quench.models.draft) it
    scores only the head's rows: the drafter picks among them and maps its picks back. The generic
    Hugging Face path calls the module, whose head returns full logits (-inf elsewhere).
    """
    runner = make_runner(draft_model, config, int8=config.draft_int8)
    head = draft_model.get_output_embeddings()
    if isinstance(runner, LlamaRunner) and isinstance(head, SubsetHead):
        return runner, HeadColumns.of(head.token_ids, head.vocab_size)
    return runner, None


def position_limit(model: torch.nn.Module) -> int | None:
    """The longest sequence the model was built for (None if its config does not say)."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)


def check_prompt_lengths(requests: Iterable[GenerationRequest], limits: dict[str, int | None]) -> None:
    """QuenchError for a prompt longer than a model's position limit (its prefill would index past
    the position tables: a bare IndexError on learned positions, untrained RoPE angles on Llama)."""
    for request in requests:
        for which, limit in limits.items():
            if limit is not None and len(request.prompt_ids) > limit:
                raise QuenchError(
                    f"request {request.key!r}: the prompt has {len(request.prompt_ids)} tokens, more than the "
                    f"{which} model's position limit of {limit} (max_position_embeddings); shorten the prompt"
                )


class QuenchBackend:
    """The `Backend` protocol over quench's engine; `generate` yields samples as they finish."""

    name = "quench"
    takes_stop_hook = True  # `generate(..., stop_hook=)`: rules per call (generate_samples checks this)

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        config: EngineConfig = EngineConfig(),
        draft_model: torch.nn.Module | None = None,
        stop_hook: StopHook | None = None,
        guard: StopObserver | None = None,
    ) -> None:
        if config.drafter in MODEL_DRAFTERS and draft_model is None:
            raise ValueError(f"EngineConfig(drafter={config.drafter!r}) needs a draft_model")
        self.config = config
        self.tokenizer = tokenizer
        self.stop_hook = stop_hook
        self.guard = guard  # early stopping from hidden states, e.g. GenGuard (None: no hidden states are even returned)
        self.eos_ids = eos_token_ids(model, tokenizer)
        self.runner = make_runner(model, config)
        self.draft_runner, self.draft_columns = (
            make_draft_runner(draft_model, config) if config.drafter in MODEL_DRAFTERS else (None, None)
        )
        self.position_limits = {"target": position_limit(model)}
        if self.draft_runner is not None:
            self.position_limits["draft"] = position_limit(draft_model)
        self._cache: KVCache | None = None
        self.last_stats = LoopStats()  # of the latest generate call

    def generate(
        self,
        requests: Iterable[GenerationRequest],
        sampling: SamplingParams,
        deadline: float | None = None,
        unbounded: bool = False,
        stop_hook: StopHook | None = None,
    ) -> Iterator[GenerationResult]:
        """Yield each sample when it finishes (order not guaranteed).

        deadline: a `time.perf_counter()` value; rows unfinished then are dropped and nothing new
        starts. unbounded: ignore each request's `n` and keep sampling the requests round-robin
        (only sensible with a deadline; see `quench.runs.budget`). stop_hook: for this call
        instead of the backend's own (e.g. a `quench.stopping.RuleHook` keyed by these requests).
        """
        requests = list(requests)
        if not requests:
            return
        check_prompt_lengths(requests, self.position_limits)
        max_len = self._max_len(requests, sampling)
        cache = self._target_cache(max_len)
        loop = DecodeLoop(
            self.runner,
            cache,
            WorkQueue(requests, unbounded=unbounded),
            StopRules(self.tokenizer, self.eos_ids, sampling.max_new_tokens, stop_hook or self.stop_hook),
            sampling,
            drafter=self._drafter(max_len),
            policy=make_policy(self.config.draft_length, self.config.draft_tokens, self.config.max_draft_tokens)
            if self.config.drafter != "none"
            else None,
            deadline=deadline,
            max_draft_rows=self.config.speculative_rows,
            guard=self.guard.start(self.tokenizer, self.config.batch_size) if self.guard is not None else None,
            share_prefixes=self.config.share_prefixes,
        )
        self.last_stats = loop.stats
        begin = time.perf_counter()
        yield from loop.run()
        log.debug("generate: %s in %.2fs", loop.stats, time.perf_counter() - begin)

    def _max_len(self, requests: list[GenerationRequest], sampling: SamplingParams) -> int:
        longest = max(len(r.prompt_ids) for r in requests)
        needed = longest + sampling.max_new_tokens + self.config.max_draft_tokens + 2
        if self.config.max_len is not None:
            if self.config.max_len < needed:
                raise ValueError(f"max_len {self.config.max_len} < {needed} needed by the longest prompt")
            return self.config.max_len
        return round_up(needed, 64)

    def _target_cache(self, max_len: int) -> KVCache:
        if self._cache is None or self._cache.max_len < max_len:
            self._cache = None  # free the old buffers before allocating new ones
            self._cache = self.runner.new_cache(self.config.batch_size, max_len)
        return self._cache

    def _drafter(self, max_len: int) -> Drafter | None:
        if self.config.drafter == "ngram":
            return NgramDrafter(self.config.batch_size, self.config.ngram_max, self.config.ngram_min)
        if self.config.drafter in MODEL_DRAFTERS:
            assert self.draft_runner is not None
            model = ModelDrafter(
                self.draft_runner, self.config.batch_size, max_len, self.config.confidence, self.draft_columns,
                self.config.share_prefixes, self.config.stop, self.config.model_draft_floor,
            )
            if self.config.drafter == "model":
                return model
            ngram = NgramDrafter(self.config.batch_size, self.config.ngram_max, self.config.ngram_min)
            return HybridDrafter(ngram, model, self.config.batch_size, self.config.max_draft_tokens, self.config.copy_caps,
                                 self.config.model_draft_floor)
        return None
