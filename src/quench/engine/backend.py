"""quench's own generation engine behind the `Backend` protocol: batched, ragged, continuous, optionally speculative
(BASS); the prompt-length checks and the draft model's runner."""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Iterable, Iterator, Sequence

import torch

from quench.engine.config import ConfigError, EngineConfig
from quench.errors import QuenchError
from quench.engine.decode import DecodeLoop, LoopParts, LoopStats
from quench.engine.draft_length import DraftLengthPolicy, make_policy
from quench.engine.drafters import Drafter, HybridDrafter, ModelDrafter, NgramDrafter
from quench.engine.kv_cache import KVCache, slot_length
from quench.engine.runners.llama import LlamaRunner
from quench.engine.observers import LoopListener, RowStopper, StopObserver
from quench.engine.rows import StopRules, eos_token_ids
from quench.engine.runners.make import make_runner
from quench.engine.runners.protocol import Runner
from quench.engine.scheduler import WorkItem, WorkQueue
from quench.engine.types import GenerationRequest, GenerationResult, SamplingParams, StopHook
from quench.engine.verify import HeadColumns
from quench.models.draft import SubsetHead

log = logging.getLogger(__name__)


def make_draft_runner(draft_model: torch.nn.Module, config: EngineConfig) -> tuple[Runner, HeadColumns | None]:
    """The runner of a draft model, and the vocabulary of its logits where it is not the whole one.

    The fast path reads `lm_head.weight`, so for a draft with a `SubsetHead` (quench.models.draft) it
    scores only the head's rows: the drafter picks among them and maps its picks back. The generic
    Hugging Face path calls the module, whose head returns full logits (-inf elsewhere).
    """
    runner = make_runner(draft_model, config, draft=True)
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


class StartReportingQueue(WorkQueue):
    """The work queue, calling `on_start(request key, sample index)` as each sample takes a slot (progress estimates)."""

    def __init__(self, requests: list[GenerationRequest], unbounded: bool, on_start: Callable[[str, int], None],
                 more: Callable[[], Sequence[GenerationRequest]] | None = None) -> None:
        super().__init__(requests, unbounded=unbounded, more=more)
        self.on_start = on_start

    def pop(self) -> WorkItem | None:
        item = super().pop()
        if item is not None:
            self.on_start(item.request.key, item.sample_index)
        return item


class QuenchBackend:
    """The `Backend` protocol over quench's engine; `generate` yields samples as they finish."""

    name = "quench"
    takes_stop_hook = True  # `generate(..., stop_hook=)`: rules per call (generate_samples checks this)
    reports_starts = True  # `generate(..., on_start=)`: told when each sample takes a slot

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        config: EngineConfig = EngineConfig(),
        draft_model: torch.nn.Module | None = None,
        stop_hook: StopHook | None = None,
        guard: StopObserver | None = None,
    ) -> None:
        if config.runs_draft_model and draft_model is None:
            raise ConfigError("drafter", f"{config.drafter!r} needs a draft_model")
        self.config = config
        self.tokenizer = tokenizer
        self.stop_hook = stop_hook
        self.guard = guard  # early stopping from hidden states, e.g. GenGuard (None: no hidden states are even returned)
        self.eos_ids = eos_token_ids(model, tokenizer)
        self.runner = make_runner(model, config)
        self.draft_runner, self.draft_columns = (
            make_draft_runner(draft_model, config) if config.runs_draft_model else (None, None)
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
        on_start: Callable[[str, int], None] | None = None,
        listeners: Iterable[LoopListener] = (),
        more: Callable[[], Sequence[GenerationRequest]] | None = None,
        longest: GenerationRequest | None = None,
    ) -> Iterator[GenerationResult]:
        """Yield each sample when it finishes (order not guaranteed).

        deadline: a `time.perf_counter()` value; rows unfinished then are dropped and nothing new
        starts. unbounded: ignore each request's `n` and keep sampling the requests round-robin
        (only sensible with a deadline; see `quench.runs.budget`). stop_hook: for this call
        instead of the backend's own (e.g. a `quench.stopping.RuleHook` keyed by these requests).
        on_start: called with (request key, sample index) when a sample takes a slot, before its prefill.
        listeners: told each token, step and finished sample (`quench.engine.observers.LoopListener`).
        more: called once the requests run out, for more to start in the same batch (nothing: the call ends once its
        rows do); longest: the longest prompt `more` may give, checked and sized for before anything starts.
        """
        requests = list(requests)
        if not requests:
            return
        sized = requests + [longest] if longest is not None else requests
        check_prompt_lengths(sized, self.position_limits)
        if more is not None:
            more = self._checked(more, max(len(r.prompt_ids) for r in sized))
        loop = DecodeLoop(
            self.loop_parts(self._max_len(sized, sampling), fitted=self.config.max_len is None),
            StartReportingQueue(requests, unbounded, on_start, more) if on_start
            else WorkQueue(requests, unbounded=unbounded, more=more),
            StopRules(self.tokenizer, self.eos_ids, sampling.max_new_tokens, stop_hook or self.stop_hook,
                      sampling.ignore_eos),
            sampling,
            deadline=deadline,
            listeners=listeners,
        )
        self.last_stats = loop.stats
        begin = time.perf_counter()
        yield from loop.run()
        log.debug("generate: %s in %.2fs", loop.stats, time.perf_counter() - begin)

    @staticmethod
    def _checked(more: Callable[[], Sequence[GenerationRequest]], longest: int) -> Callable[[], list[GenerationRequest]]:
        """`more`, refusing a prompt longer than the `longest` the call was sized for."""

        def checked() -> list[GenerationRequest]:
            added = list(more())
            for request in added:
                if len(request.prompt_ids) > longest:
                    raise ValueError(f"request {request.key!r}: {len(request.prompt_ids)} prompt tokens, more than the "
                                     f"{longest} the call was sized for")
            return added

        return checked

    def _max_len(self, requests: list[GenerationRequest], sampling: SamplingParams) -> int:
        longest = max(len(r.prompt_ids) for r in requests)
        needed = longest + sampling.max_new_tokens + self.config.row_headroom
        if self.config.max_len is not None:
            if self.config.max_len < needed:
                raise ValueError(f"max_len {self.config.max_len} < {needed} needed by the longest prompt")
            return self.config.max_len
        return slot_length(longest, sampling.max_new_tokens, self.config.row_headroom)

    def loop_parts(self, max_len: int, fitted: bool = False) -> LoopParts:
        """What a decode loop runs on, for rows of at most `max_len` positions: the target and its cache, a fresh
        drafter, draft-length policy and guard state. fitted: the loop sizes the cache to the rows it runs."""
        return LoopParts(
            self.runner,
            self.fitted_cache() if fitted else self.target_cache(max_len),
            drafter=self.new_drafter(max_len),
            policy=self.draft_policy(),
            guard=self.start_guard(),
            share_prefixes=self.config.share_prefixes,
            max_draft_rows=self.config.draft_max_rows or None,
            draft_sampled=self.config.draft_sampled,
            fit_cache=self.config.row_headroom if fitted else None,
        )

    def target_cache(self, max_len: int) -> KVCache:
        """The engine's cache, reallocated if it holds fewer than `max_len` positions per row."""
        if self._cache is None or self._cache.max_len < max_len:
            self._cache = None  # free the old buffers before allocating new ones
            self._cache = self.runner.new_cache(self.config.batch_size, max_len)
        return self._cache

    def fitted_cache(self) -> KVCache:
        """The engine's cache at whatever length it has (the decode loop fits it to its rows)."""
        if self._cache is None:
            self._cache = self.runner.new_cache(self.config.batch_size, 64)  # buffers come with the first rows
        return self._cache

    def draft_policy(self) -> DraftLengthPolicy | None:
        """A fresh draft-length policy (None without a drafter)."""
        if self.config.drafter == "none":
            return None
        return make_policy(self.config.draft_length, self.config.draft_tokens, self.config.max_draft_tokens)

    def start_guard(self) -> RowStopper | None:
        """The guard's fresh state over the batch's slots (None without a guard)."""
        return self.guard.start(self.tokenizer, self.config.batch_size) if self.guard is not None else None

    def new_drafter(self, max_len: int) -> Drafter | None:
        """A fresh drafter for rows of at most `max_len` positions (None without one)."""
        if self.config.drafter == "ngram":
            return NgramDrafter(self.config.batch_size, self.config.ngram_max, self.config.ngram_min,
                                self.config.draft_loop_tokens)
        if self.config.runs_draft_model:
            assert self.draft_runner is not None
            model = ModelDrafter(
                self.draft_runner, self.config.batch_size, max_len, self.config.draft_confidence, self.draft_columns,
                self.config.share_prefixes, self.config.draft_stop, self.config.min_model_draft,
            )
            if self.config.drafter == "draft":
                return model
            ngram = NgramDrafter(self.config.batch_size, self.config.ngram_max, self.config.ngram_min,
                                 self.config.draft_loop_tokens)
            return HybridDrafter(ngram, model, self.config.batch_size, self.config.max_draft_tokens,
                                 self.config.row_copy_lengths, self.config.min_model_draft)
        return None
