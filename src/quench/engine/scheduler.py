"""Which sample starts next (continuous batching) and the shared prompt prefill of each request."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from quench.engine.kv_cache import Prefix, round_up
from quench.engine.runners.protocol import Runner
from quench.engine.types import GenerationRequest


@dataclass(frozen=True)
class WorkItem:
    request_index: int
    request: GenerationRequest
    sample_index: int


class WorkQueue:
    """The samples still to start: request after request, or round-robin without end (time budgets).

    more: called once the requests run out, for the next ones to append (an engine process asks its parent for
    another block); nothing returned ends the queue."""

    def __init__(self, requests: Sequence[GenerationRequest], unbounded: bool = False,
                 more: Callable[[], Sequence[GenerationRequest]] | None = None) -> None:
        if unbounded and more is not None:
            raise ValueError("a queue without end takes no more requests")
        self.requests = list(requests)
        self.unbounded = unbounded
        self.more = more
        self._request = 0
        self._started = [0] * len(self.requests)  # samples started per request
        self.closed = False

    def pop(self) -> WorkItem | None:
        if self.closed or not self.requests:
            return None
        if self.unbounded:
            index = self._request
            self._request = (self._request + 1) % len(self.requests)
        else:
            while self._request < len(self.requests) and self._started[self._request] >= self.requests[self._request].n:
                self._request += 1
                if self._request == len(self.requests):
                    self._extend()
            if self._request >= len(self.requests):
                return None
            index = self._request
        request = self.requests[index]
        sample = request.sample_offset + self._started[index]
        self._started[index] += 1
        return WorkItem(index, request, sample)

    def pending(self, request_index: int) -> bool:
        """Whether more samples of this request will start (so its prefill is worth keeping)."""
        if self.closed:
            return False
        return self.unbounded or self._started[request_index] < self.requests[request_index].n

    def _extend(self) -> None:
        """Append what `more` gives; once it gives nothing, ask no more."""
        if self.closed or self.more is None:
            return
        added = list(self.more())
        if not added:
            self.more = None
        self.requests += added
        self._started += [0] * len(added)


# A prompt that shares at least this many leading tokens with one prefilled before copies their keys/values
# instead of computing them (shorter shared runs are not worth the copy).
MIN_SHARED_TOKENS = 16
RECENT_PROMPTS = 8  # prompts whose keys/values stay available for sharing
SHORTEN_AT_MOST = 16  # tokens a shared run may be cut by to make the rest run the whole prompt's kernels


class PrefixStore:
    """Prefills each prompt once; every sample of the request starts from a copy of its keys/values.

    Prompts often share their beginning (a chat template's system turn and instruction: 47 of ~156 tokens
    on HumanEval with the default model). With `share` on, a prompt whose first tokens match one of the
    last RECENT_PROMPTS prompts copies those positions' keys/values and feeds only the rest, where the runner
    promises the same bits as a whole prefill, so outputs do not depend on which prompts came before (batch
    invariance): the lending prompt's keys/values, the new prompt's whole prefill and the rest it feeds
    must all come from the same kernels (`Runner.prefill_kernel`, not None)."""

    def __init__(self, runner: Runner, bucket: int = 64, share: bool = True) -> None:
        self.runner = runner
        self.bucket = bucket
        self.share = share
        self.shared_tokens = 0  # prompt positions copied instead of computed, over this store's life
        self._prefixes: dict[int, tuple[Prefix, torch.Tensor]] = {}
        # recent prompts that may lend: their keys/values and the kernels that computed them
        self._recent: OrderedDict[tuple[int, ...], tuple[Prefix, str]] = OrderedDict()

    def __contains__(self, request_index: int) -> bool:
        return request_index in self._prefixes

    def ensure(self, items: Sequence[WorkItem]) -> None:
        """Prefill the prompts of `items` not stored yet, one at a time.

        One at a time because a padded batch computes its padding for no gain: a long prefill is compute
        bound, so batching it saves nothing but per-call overhead.
        """
        todo = {item.request_index: item.request.prompt_ids for item in items if item.request_index not in self}
        for request_index, prompt in todo.items():
            shared = self._shared_head(prompt)
            if shared is None:
                [entry] = prefill(self.runner, [prompt], self.bucket)
            else:
                entry = prefill_after(self.runner, shared, prompt, self.bucket)
            self.store(request_index, prompt, entry)

    def begin(self, prompt: Sequence[int]) -> PartialPrefill:
        """A prefill of `prompt` to feed in chunks (chunked prefill), from the shared beginning `ensure` would
        copy; `store` its result once every token is in."""
        return PartialPrefill(self.runner, prompt, self._shared_head(prompt), self.bucket)

    def store(self, request_index: int, prompt: Sequence[int], entry: tuple[Prefix, torch.Tensor]) -> None:
        """Keep a prompt's prefill for its request's samples and, where the runner promises its bits, to lend."""
        self._prefixes[request_index] = entry
        whole = self._kernel(prompt)
        if whole is not None:
            key = tuple(prompt)
            self._recent[key] = (entry[0], whole)
            self._recent.move_to_end(key)
            while len(self._recent) > RECENT_PROMPTS:
                self._recent.popitem(last=False)

    def _kernel(self, prompt: Sequence[int]) -> str | None:
        """The kernels of the prompt's whole prefill where it may borrow and lend (None: neither)."""
        return self.runner.prefill_kernel(len(prompt)) if self.share else None

    def _shared_head(self, prompt: Sequence[int]) -> Prefix | None:
        """The keys/values of the prompt's beginning that a recent prompt lends (None: it feeds every token)."""
        whole = self._kernel(prompt)
        shared, source = self._longest_shared(prompt, whole) if whole is not None else (0, None)
        if source is None:
            return None
        self.shared_tokens += shared
        return source.head(shared)

    def _longest_shared(self, prompt: Sequence[int], whole: str) -> tuple[int, Prefix | None]:
        """The most leading tokens of `prompt` whose keys/values a recent prompt holds and may lend, and its
        prefix; `whole`: the kernels of the prompt's whole prefill (`Runner.prefill_kernel`)."""
        best, source = 0, None
        for tokens, (prefix, kernel) in self._recent.items():
            if kernel != whole:  # computed by other kernels than this prompt's whole prefill would use
                continue
            common = common_length(tokens, prompt)
            # a short rest may run another GEMM kernel than the whole prompt: copy a few tokens less
            for shared in range(min(common, len(prompt) - 1), max(common - SHORTEN_AT_MOST, MIN_SHARED_TOKENS - 1), -1):
                if shared > best and self.runner.prefill_kernel(len(prompt) - shared) == whole:
                    best, source = shared, prefix
                    break
        return best, source

    def get(self, request_index: int) -> tuple[Prefix, torch.Tensor]:
        """(keys/values of the prompt, float32 logits (V,) of the token after it)."""
        return self._prefixes[request_index]

    def release(self, request_index: int) -> None:
        self._prefixes.pop(request_index, None)


def common_length(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens a and b share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def splits_exactly(runner: Runner, length: int) -> bool:
    """Whether a prompt of `length` tokens fed in chunks of any size gets the bits of its whole prefill: the
    runner promises a feed's bits (`Runner.prefill_kernel`) and a one-token feed runs the whole prompt's
    kernels. Quench's kernels change with a feed's size only at thresholds (one up to so many rows, the
    next beyond), so then every size between runs them too; a batch-invariant runner runs one for all."""
    whole = runner.prefill_kernel(length)
    return whole is not None and runner.prefill_kernel(1) == whole


class PartialPrefill:
    """A prompt prefilled a chunk at a time into a one-row cache of its own; `entry` once `rest` is 0."""

    def __init__(self, runner: Runner, prompt: Sequence[int], shared: Prefix | None = None, bucket: int = 64) -> None:
        self.runner = runner
        self.prompt = list(prompt)
        self.cache = runner.new_cache(1, round_up(len(prompt), bucket))
        self.done = 0  # leading prompt tokens whose keys/values the cache holds
        self.logits: torch.Tensor | None = None  # (V,) after the last token fed
        if shared is not None:
            self.cache.install(0, shared)
            self.done = shared.length

    @property
    def rest(self) -> int:
        """Prompt tokens still to feed."""
        return len(self.prompt) - self.done

    def feed(self, tokens: int) -> int:
        """Feed the next `tokens` prompt tokens (fewer where fewer are left); how many went in."""
        chunk = torch.tensor([self.prompt[self.done : self.done + tokens]], dtype=torch.long)  # (1, C)
        at = torch.tensor([chunk.shape[1] - 1])
        logits = self.runner.forward(self.cache, chunk, torch.tensor([self.done]), logits_at=at)  # (1, V)
        self.done += chunk.shape[1]
        self.logits = logits[0]
        return chunk.shape[1]

    def entry(self) -> tuple[Prefix, torch.Tensor]:
        """(keys/values of the whole prompt, float32 logits (V,) of the token after it), as `prefill` gives."""
        if self.rest or self.logits is None:
            raise ValueError(f"{self.rest} prompt tokens are still to feed")
        return self.cache.snapshot(0, len(self.prompt)), self.logits


def prefill_after(runner: Runner, shared: Prefix, prompt: Sequence[int], bucket: int = 64) -> tuple[Prefix, torch.Tensor]:
    """Prefill `prompt` whose first `shared.length` tokens' keys/values are given: copy them, feed the rest."""
    if not 0 < shared.length < len(prompt):
        raise ValueError(f"a shared prefix of {shared.length} tokens must be shorter than the prompt ({len(prompt)})")
    cache = runner.new_cache(1, round_up(len(prompt), bucket))
    cache.install(0, shared)
    rest = torch.tensor([list(prompt[shared.length :])], dtype=torch.long)  # (1, P - shared)
    start = torch.tensor([shared.length])
    logits = runner.forward(cache, rest, start, logits_at=torch.tensor([rest.shape[1] - 1]))  # (1, V)
    return cache.snapshot(0, len(prompt)), logits[0]


def prefill(runner: Runner, prompts: list[Sequence[int]], bucket: int = 64) -> list[tuple[Prefix, torch.Tensor]]:
    """Run prompts (right-padded into one batch) through the model; per prompt its prefix and next-token logits."""
    if any(len(p) == 0 for p in prompts):
        raise ValueError("cannot prefill an empty prompt")
    lengths = torch.tensor([len(p) for p in prompts])  # (R,)
    width = int(lengths.max())
    tokens = torch.zeros(len(prompts), width, dtype=torch.long)  # (R, P); padding sits after each prompt
    for r, prompt in enumerate(prompts):
        tokens[r, : len(prompt)] = torch.tensor(prompt, dtype=torch.long)
    cache = runner.new_cache(len(prompts), round_up(width, bucket))
    start = torch.zeros(len(prompts), dtype=torch.long)
    logits = runner.forward(cache, tokens, start, logits_at=lengths - 1, counts=lengths)  # padding: skipped where it can be
    return [(cache.snapshot(r, int(n)), logits[r]) for r, n in enumerate(lengths)]
