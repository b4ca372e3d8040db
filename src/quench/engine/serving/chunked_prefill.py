"""Chunked prefill for the live loop (`quench.engine.serving.live`): a prompt longer than what is left of a step's
prefill budget is fed a chunk per step, while its samples hold their slots without decoding.

A chunk runs only where the runner promises it the bits of a whole prefill (`splits_exactly`), so the
samples' first tokens and everything after are what a whole prefill gives. The completed prompt goes to
the prefix store as a whole one would (its samples start from it, it may lend its beginning).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator, Sequence

from quench.engine.decode import LoopStats
from quench.engine.scheduler import PartialPrefill, PrefixStore, WorkItem

Placed = tuple[int, WorkItem]  # (slot, sample)


@dataclass
class Prefilling:
    """A prompt under way and the samples that start once it is in."""

    prefill: PartialPrefill
    items: list[Placed]  # their slots are held meanwhile: no other row takes them, none of them decodes


class ChunkedPrefills:
    """The prompts under way, oldest first, keyed by request index."""

    def __init__(self, prefixes: PrefixStore, stats: LoopStats) -> None:
        self.prefixes = prefixes  # where a completed prompt goes, and where one starts from a shared beginning
        self.stats = stats
        self._under_way: dict[int, Prefilling] = {}

    def __contains__(self, request_index: int) -> bool:
        return request_index in self._under_way

    def __iter__(self) -> Iterator[int]:
        return iter(self._under_way)

    def __len__(self) -> int:
        return len(self._under_way)

    def held(self) -> set[int]:
        """The slots that samples of prompts under way hold."""
        return {slot for prefilling in self._under_way.values() for slot, _ in prefilling.items}

    def start(self, placed: Placed, tokens: int) -> tuple[list[Placed], int]:
        """Begin the prompt of `placed`'s sample with a chunk of at most `tokens`: the samples now ready (a
        shared beginning may leave a single chunk) and the tokens fed."""
        index = placed[1].request_index
        self._under_way[index] = Prefilling(self.prefixes.begin(placed[1].request.prompt_ids), [placed])
        fed = self._feed(index, tokens)
        return self._complete(index), fed

    def join(self, placed: Placed) -> None:
        """Another sample of a prompt under way: it starts with the others."""
        self._under_way[placed[1].request_index].items.append(placed)

    def advance(self, budget: int) -> tuple[list[Placed], int]:
        """Feed the prompts under way their next chunks, oldest first, `budget` tokens in all: the samples of
        those now complete (their prompts in the prefix store) and the tokens fed."""
        ready: list[Placed] = []
        spent = 0
        for index in list(self._under_way):
            if spent >= budget:
                break
            spent += self._feed(index, budget - spent)
            ready.extend(self._complete(index))
        return ready, spent

    def drop(self, request_indices: Sequence[int] | set[int]) -> None:
        """Forget these requests' prompts (cancelled, or their loop failed): their slots are free again."""
        for index in list(request_indices):
            self._under_way.pop(index, None)

    def _feed(self, request_index: int, tokens: int) -> int:
        cpu = time.process_time()
        fed = self._under_way[request_index].prefill.feed(tokens)
        self.stats.prefill_cpu_s += time.process_time() - cpu
        return fed

    def _complete(self, request_index: int) -> list[Placed]:
        prefill = self._under_way[request_index].prefill
        if prefill.rest:
            return []
        self.prefixes.store(request_index, prefill.prompt, prefill.entry())
        self.stats.prefill_tokens += len(prefill.prompt)
        return self._under_way.pop(request_index).items
