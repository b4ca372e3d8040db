"""quench's own generation engine: batched, ragged, continuous, optionally speculative (BASS)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import torch

from quench.generation.decode import DecodeLoop, LoopStats
from quench.generation.draft_length import make_policy
from quench.generation.drafters import Drafter, ModelDrafter, NgramDrafter
from quench.generation.hf_runner import HFRunner
from quench.generation.kv_cache import KVCache, round_up
from quench.generation.llama import LlamaRunner, is_llama
from quench.generation.rows import StopRules, eos_token_ids
from quench.generation.scheduler import Runner, WorkQueue
from quench.generation.types import GenerationRequest, GenerationResult, SamplingParams, StopHook

log = logging.getLogger(__name__)

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32, "float64": torch.float64}


@dataclass(frozen=True)
class EngineConfig:
    batch_size: int = 8  # slots decoded together; finished slots are refilled at once
    drafter: str = "none"  # "none" (regular decoding), "ngram" (prompt lookup) or "model" (needs draft_model)
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

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.drafter not in ("none", "ngram", "model"):
            raise ValueError(f"drafter must be 'none', 'ngram' or 'model', got {self.drafter!r}")
        if self.draft_length not in ("bass", "fixed"):
            raise ValueError(f"draft_length must be 'bass' or 'fixed', got {self.draft_length!r}")
        if not 1 <= self.draft_tokens <= self.max_draft_tokens:
            raise ValueError("need 1 <= draft_tokens <= max_draft_tokens")
        if self.dtype != "auto" and self.dtype not in _DTYPES:
            raise ValueError(f"dtype must be 'auto' or one of {sorted(_DTYPES)}, got {self.dtype!r}")


def make_runner(model: torch.nn.Module, config: EngineConfig) -> Runner:
    """The Llama fast path when it applies (and is enabled), else the generic Hugging Face path."""
    if config.dtype != "auto":
        model.to(_DTYPES[config.dtype])
    model.eval()
    if config.fast_path and is_llama(model):
        return LlamaRunner(
            model,
            prepack=config.prepack and not config.compile,
            compile=config.compile,
            native_attention=config.native_attention and not config.compile,
        )
    return HFRunner(model)


class QuenchBackend:
    """The `Backend` protocol over quench's engine; `generate` yields samples as they finish."""

    name = "quench"

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        config: EngineConfig = EngineConfig(),
        draft_model: torch.nn.Module | None = None,
        stop_hook: StopHook | None = None,
    ) -> None:
        if config.drafter == "model" and draft_model is None:
            raise ValueError("EngineConfig(drafter='model') needs a draft_model")
        self.config = config
        self.tokenizer = tokenizer
        self.stop_hook = stop_hook
        self.eos_ids = eos_token_ids(model, tokenizer)
        self.runner = make_runner(model, config)
        self.draft_runner = make_runner(draft_model, config) if config.drafter == "model" else None
        self._cache: KVCache | None = None
        self.last_stats = LoopStats()  # of the latest generate call

    def generate(
        self,
        requests: Iterable[GenerationRequest],
        sampling: SamplingParams,
        deadline: float | None = None,
        unbounded: bool = False,
    ) -> Iterator[GenerationResult]:
        """Yield each sample when it finishes (order not guaranteed).

        deadline: a `time.perf_counter()` value; rows unfinished then are dropped and nothing new
        starts. unbounded: ignore each request's `n` and keep sampling the requests round-robin
        (only sensible with a deadline; see `quench.generation.budget`).
        """
        requests = list(requests)
        if not requests:
            return
        max_len = self._max_len(requests, sampling)
        cache = self._target_cache(max_len)
        loop = DecodeLoop(
            self.runner,
            cache,
            WorkQueue(requests, unbounded=unbounded),
            StopRules(self.tokenizer, self.eos_ids, sampling.max_new_tokens, self.stop_hook),
            sampling,
            drafter=self._drafter(max_len),
            policy=make_policy(self.config.draft_length, self.config.draft_tokens, self.config.max_draft_tokens)
            if self.config.drafter != "none"
            else None,
            deadline=deadline,
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
        if self.config.drafter == "model":
            assert self.draft_runner is not None
            return ModelDrafter(self.draft_runner, self.config.batch_size, max_len)
        return None
