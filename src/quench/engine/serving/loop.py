"""The live decode loop: the core decode loop (`quench.engine.decode`) over a `LiveQueue`, with the server's admission.

Every request shares one batch, whatever its settings (`quench.engine.serving.live` gives the whole picture).
The steps are the core loop's: each row draws with its own request's settings and stops within its own limits
(taken from the queue as its sample starts), so a step whose rows draw alike may speculate and a mixed one is a
regular step (`quench.engine.decode`). What this loop adds is where rows come from and which of them step:
fair admission under a prefill budget (paced by `PrefillPacer`), chunked prefill and short requests first. It
also keeps a step's logits when a row asked for log-probabilities, and ends a request with its last sample
(`completed`). What reaches the requests' sinks comes from `LiveSinks`, a listener that only reads.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import replace
from typing import Iterator

import torch

from quench.engine.decode import DecodeLoop, LoopParts
from quench.engine.logprobs import ScoredPrefixes
from quench.engine.rows import Row, StopRules
from quench.engine.scheduler import WorkItem, splits_exactly
from quench.engine.serving.chunked_prefill import ChunkedPrefills
from quench.engine.serving.live_queue import LiveQueue
from quench.engine.serving.prefill_pacer import PrefillPacer
from quench.engine.serving.recording_runner import RecordingRunner
from quench.engine.serving.sinks import LiveSinks
from quench.engine.types import GenerationResult, SamplingParams

PREFILL_BUDGET = 512  # prompt tokens prefilled per step, at most (a longer prompt goes in chunks over several)
SHORT_REQUEST = 256  # tokens left to generate over all of a request's samples, at most, for it to go first
MAX_WAIT_STEPS = 16  # a long request's rows wait at most this many steps in a row for short requests


class LiveLoop(DecodeLoop):
    """A decode loop over a `LiveQueue`: cancelled rows dropped, fair admission under a prefill budget, short
    requests first (module docstring); `LiveSinks` hands what it does to each request's sink.

    stop: the rules over every row (its max_new_tokens: the context bound); each row stops within its request's
    own limits. Its runner is a `RecordingRunner`, so a step's logits are at hand when a row asked for
    log-probabilities."""

    def __init__(
        self, parts: LoopParts, live: LiveQueue, stop: StopRules, prefill_budget: int = PREFILL_BUDGET,
        prefill_share: float | None = None,
    ) -> None:
        self.recorder = RecordingRunner(parts.runner)
        super().__init__(replace(parts, runner=self.recorder), live, stop, SamplingParams(max_new_tokens=stop.max_new_tokens),
                         row_sampling=self._sampling_of)
        self.live = live
        self.prefill_budget = prefill_budget
        # None: every admission may prefill the whole budget; else paced to a share of a decode step
        self.pacer = PrefillPacer(prefill_share, prefill_budget) if prefill_share is not None else None
        self.max_len = stop.max_new_tokens  # the context bound
        self.step_start: dict[int, int] = {}  # slot -> its generated tokens before this step's
        self.settings: dict[int, SamplingParams] = {}  # request index -> its settings, taken with its first sample
        self.scored: set[int] = set()  # request indices that asked for log-probabilities
        self.waiting: set[int] = set()  # requests whose rows wait out this step (`_short_first`)
        self.waited = 0  # steps in a row that long requests' rows have waited
        self.scored_prefixes = ScoredPrefixes(self.recorder, share=self.prefixes.share)
        self.prefixes = self.scored_prefixes
        self.prefilling = ChunkedPrefills(self.prefixes, self.stats)  # prompts fed a chunk per step
        self.listeners.append(LiveSinks(self))

    def _sampling_of(self, item: WorkItem) -> SamplingParams:
        """The settings a sample's row draws with and stops within: its request's."""
        return self.settings[item.request_index]

    # -- admission ---------------------------------------------------------------------------------

    def admit(self) -> Iterator[GenerationResult]:
        """Drop cancelled rows, then spend one prefill budget (`_admit_once`); while no row decodes there is
        no stall to bound, so chunked prefills go on until a row runs or none is left."""
        yield from self._admit_once()
        while self.prefilling and all(row is None for row in self.slots):
            yield from self._admit_once()

    def _admit_once(self) -> Iterator[GenerationResult]:
        """Feed the prompts under way their next chunks, then fill free slots fairly, prefilling at most
        `prefill_budget` prompt tokens in all (at least one prompt), or while rows decode what the pacer allows
        (`quench.engine.serving.prefill_pacer`)."""
        self._drop_cancelled()
        began = time.perf_counter()
        budget = self.prefill_budget
        if self.pacer is not None:
            budget = self.pacer.tokens(decoding=any(row is not None for row in self.slots))
        items, spent = self.prefilling.advance(budget)
        taken = self.prefilling.held() | {slot for slot, _ in items}  # under way, or starting from a completed prompt
        free = [slot for slot, row in enumerate(self.slots) if row is None and slot not in taken]
        fresh: set[int] = set()  # requests whose prompt this admission prefills whole
        while free:
            entry = self.live.next_entry(len(free))
            if entry is None:
                break
            length, room = len(entry.request.prompt_ids), budget - spent
            prefilled = entry.index in self.prefixes or entry.index in fresh or entry.index in self.prefilling
            chunked = not prefilled and length > room > 0 and splits_exactly(self.runner, length)
            if not prefilled and not chunked and spent and length > room:
                break  # the next step prefills it
            item = self.live.take(entry)
            if item is None:
                continue
            self.settings[entry.index] = entry.sampling
            if entry.top_logprobs is not None:
                self.scored.add(entry.index)
            placed = (free.pop(0), item)
            if entry.index in self.prefilling:
                self.prefilling.join(placed)
            elif chunked:
                ready, fed = self.prefilling.start(placed, room)
                items, spent = items + ready, spent + fed
            else:
                if not prefilled:
                    spent += length
                    fresh.add(entry.index)
                items.append(placed)
        if items:
            yield from self.start_rows(items)
        if self.pacer is not None:
            self.pacer.prefilled(spent, time.perf_counter() - began)

    def _drop_cancelled(self) -> None:
        cancelled = set(self.live.cancelled())
        if not cancelled:
            return
        for slot, row in enumerate(self.slots):
            if row is not None and row.request_index in cancelled:
                self.slots[slot] = None  # a free slot: the admission refills it
        self.prefilling.drop(cancelled)  # the slots they held are free again
        for index in cancelled:
            self.prefixes.release(index)
            self.forget(index)
            if self.drafter is not None:
                self.drafter.release(index)
            self.live.remove(index)

    def forget(self, request_index: int) -> None:
        """Drop what the loop keeps about a request that has ended or was cancelled."""
        self.settings.pop(request_index, None)
        self.scored.discard(request_index)
        self.scored_prefixes.handed.pop(request_index, None)

    def completed(self, row: Row) -> None:
        """A sample finished and its sink was told (`LiveSinks`): its request ends with its last sample."""
        if self.live.finish(row.request_index):
            self.forget(row.request_index)

    # -- steps -------------------------------------------------------------------------------------

    def stepping(self) -> list[Row | None]:
        """The slots this step runs: rows of the requests in `waiting` wait (their caches kept)."""
        if not self.waiting:
            return self.slots
        return [None if row is not None and row.request_index in self.waiting else row for row in self.slots]

    def _short_first(self) -> set[int]:
        """The requests whose rows wait this step: while a short request (at most SHORT_REQUEST tokens left over
        its samples) has rows running, the long ones' rows wait, so a step costs the short one what its own rows
        cost; at most MAX_WAIT_STEPS steps in a row, then the long rows take one step."""
        rows_of: dict[int, list[Row]] = defaultdict(list)
        for row in self.slots:
            if row is not None:
                rows_of[row.request_index].append(row)
        left: dict[int, int] = {}  # request index -> tokens it may still generate
        for index, rows in rows_of.items():
            most = rows[0].limits.max_new_tokens  # the request's own
            entry = self.live.entry(index)
            unstarted = entry.request.n - entry.started if entry is not None else 0
            left[index] = sum(max(0, most - len(row.generated)) for row in rows) + unstarted * most
        short = {index for index, tokens in left.items() if tokens <= SHORT_REQUEST}
        if not short or len(short) == len(left) or self.waited >= MAX_WAIT_STEPS:
            self.waited = 0
            return set()
        self.waited += 1
        return set(left) - short

    def step(self) -> Iterator[GenerationResult]:
        """The core loop's step over the rows that do not wait (`_short_first`), recording its logits when one of
        them asked for log-probabilities; the pacer learns its time."""
        began = time.perf_counter()
        self.waiting = self._short_first()
        active = [b for b, row in enumerate(self.stepping()) if row is not None]
        self.recorder.recording = any(self.slots[b].request_index in self.scored for b in active)
        self.step_start = {b: len(self.slots[b].generated) for b in active}
        yield from super().step()
        if self.pacer is not None:
            self.pacer.stepped(time.perf_counter() - began)

    def token_logits(self, slot: int, row: Row) -> torch.Tensor:
        """logits (V,) of the position that predicts the token about to be appended to `row` in `slot` (a row whose
        request asked for log-probabilities): its prompt's last position for the first token, else this step's."""
        if not row.generated:
            return self.scored_prefixes.handed[row.request_index]
        last = self.recorder.last
        assert last is not None, "a scored row's step recorded its logits"
        return last.at(slot, len(row.generated) - self.step_start[slot])
