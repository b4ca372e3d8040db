"""Which sample starts next (continuous batching) and the shared prompt prefill of each request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import torch

from quench.generation.kv_cache import KVCache, Prefix, round_up
from quench.generation.types import GenerationRequest


class Runner(Protocol):
    """A causal LM driven over a `KVCache` (the Llama fast path or the generic Hugging Face path)."""

    vocab_size: int

    def new_cache(self, batch: int, max_len: int) -> KVCache: ...

    def forward(
        self,
        cache: KVCache,
        tokens: torch.Tensor,
        start: torch.Tensor,
        logits_at: torch.Tensor | None = None,
        counts: torch.Tensor | None = None,
        hidden: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """tokens (B, S) fed at positions start[b] + s -> float32 logits (B, S, V), or (B, V) at logits_at.

        counts (B,), optional: row b's real tokens are its first counts[b]; a runner may skip the rest.
        hidden: also return the final-norm hidden states (B, S, D) (or (B, D) at logits_at), for GenGuard.
        """
        ...

    def packed_logits(
        self, cache: KVCache, tokens: torch.Tensor, start: torch.Tensor, counts: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Feed tokens as `forward` does -> float32 logits of the real tokens only: (N, V) with
        N = counts.sum(), row 0's counts[0] tokens first, then row 1's, and so on."""
        ...

    def greedy_tokens(
        self, cache: KVCache, tokens: torch.Tensor, start: torch.Tensor, counts: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Feed tokens as `forward` does -> the argmax token (first maximum) at each position (B, S).

        Greedy steps need nothing else; a runner may skip building float32 logits. Padding: any value.
        """
        ...


@dataclass(frozen=True)
class WorkItem:
    request_index: int
    request: GenerationRequest
    sample_index: int


class WorkQueue:
    """The samples still to start: request after request, or round-robin without end (time budgets)."""

    def __init__(self, requests: Sequence[GenerationRequest], unbounded: bool = False) -> None:
        self.requests = list(requests)
        self.unbounded = unbounded
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


class PrefixStore:
    """Prefills each prompt once; every sample of the request starts from a copy of its keys/values."""

    def __init__(self, runner: Runner, bucket: int = 64) -> None:
        self.runner = runner
        self.bucket = bucket
        self._prefixes: dict[int, tuple[Prefix, torch.Tensor]] = {}

    def __contains__(self, request_index: int) -> bool:
        return request_index in self._prefixes

    def ensure(self, items: Sequence[WorkItem]) -> None:
        """Prefill the prompts of `items` not stored yet, one at a time.

        One at a time because a padded batch wastes ~10% on HumanEval prompts for no gain: a long
        prefill is compute bound, so batching it saves nothing but per-call overhead.
        """
        todo = {item.request_index: item.request.prompt_ids for item in items if item.request_index not in self}
        for request_index, prompt in todo.items():
            [self._prefixes[request_index]] = prefill(self.runner, [prompt], self.bucket)

    def get(self, request_index: int) -> tuple[Prefix, torch.Tensor]:
        """(keys/values of the prompt, float32 logits (V,) of the token after it)."""
        return self._prefixes[request_index]

    def release(self, request_index: int) -> None:
        self._prefixes.pop(request_index, None)


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
