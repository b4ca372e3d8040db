"""The live decode loop: the decode loop over a `LiveQueue`, with the server's admission and steps.

Every request shares one batch, whatever its settings (`quench.engine.serving.live` gives the whole
picture): fair admission under a prefill budget, chunked prefill, short requests first, per-row
sampling settings, per-request stop rules and log-probabilities for the rows that ask. What reaches
the requests' sinks comes from `LiveSinks`, a listener on the loop.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import replace
from typing import Iterator, Sequence

import torch

from quench.engine.decode import DecodeLoop, LoopParts, StepPlan, fed_tokens
from quench.engine.logprobs import ScoredPrefixes, ScoringRunner
from quench.engine.rows import Row, StopRules
from quench.engine.sampling import next_tokens
from quench.engine.scheduler import WorkItem, splits_exactly
from quench.engine.serving.chunked_prefill import ChunkedPrefills
from quench.engine.serving.live_queue import LiveQueue
from quench.engine.serving.prefill_pacer import PrefillPacer
from quench.engine.serving.sinks import LiveSinks
from quench.engine.types import GenerationResult, SamplingParams
from quench.engine.verify import Verdict

PREFILL_BUDGET = 512  # prompt tokens prefilled per step, at most (a longer prompt goes in chunks over several)
SHORT_REQUEST = 256  # tokens left to generate over all of a request's samples, at most, for it to go first
MAX_WAIT_STEPS = 16  # a long request's rows wait at most this many steps in a row for short requests


class LiveStopRules(StopRules):
    """StopRules with each request's own `max_new_tokens` and `ignore_eos` (the loop-wide max_new_tokens is
    the context bound)."""

    def __init__(self, tokenizer, eos_ids: frozenset[int], max_new_tokens: int, queue: LiveQueue) -> None:
        super().__init__(tokenizer, eos_ids, max_new_tokens)
        self.queue = queue
        self.no_eos = StopRules(tokenizer, frozenset(), max_new_tokens)  # for rows whose request ignores EOS

    def append(self, row: Row, token: int) -> str | None:
        entry = self.queue.entry(row.request_index)
        if entry is not None and entry.sampling.ignore_eos:
            reason = self.no_eos.append(row, token)
        else:
            reason = super().append(row, token)
        if reason is None and entry is not None and len(row.generated) >= entry.sampling.max_new_tokens:
            return "length"
        return reason


class RecordingRunner(ScoringRunner):
    """A `ScoringRunner` that keeps a step's logits only while `recording` (a row of the step asked for
    log-probabilities); otherwise every call goes straight to the runner it wraps."""

    recording = False

    def forward(self, cache, tokens: torch.Tensor, start: torch.Tensor, **kwargs):
        if not self.recording:
            return self.runner.forward(cache, tokens, start, **kwargs)
        return super().forward(cache, tokens, start, **kwargs)

    def greedy_tokens(self, cache, tokens: torch.Tensor, start: torch.Tensor, counts=None) -> torch.Tensor:
        if not self.recording:
            return self.runner.greedy_tokens(cache, tokens, start, counts=counts)
        return super().greedy_tokens(cache, tokens, start, counts=counts)

    def packed_logits(self, cache, tokens: torch.Tensor, start: torch.Tensor, counts=None) -> torch.Tensor:
        if not self.recording:
            return self.runner.packed_logits(cache, tokens, start, counts=counts)
        return super().packed_logits(cache, tokens, start, counts=counts)


class LiveLoop(DecodeLoop):
    """A decode loop over a `LiveQueue`: cancelled rows dropped, fair admission under a prefill budget and
    per-row sampling settings (module docstring); `LiveSinks` hands what it does to each request's sink.

    Its runner is a `RecordingRunner`, so a step's logits are at hand when a row asked for log-probabilities."""

    def __init__(
        self, parts: LoopParts, live: LiveQueue, stop: LiveStopRules, prefill_budget: int = PREFILL_BUDGET,
        prefill_share: float | None = None,
    ) -> None:
        # each step draws with its rows' own settings (`step`); the loop-wide one carries the context bound
        super().__init__(replace(parts, runner=RecordingRunner(parts.runner)), live, stop,
                         SamplingParams(max_new_tokens=stop.max_new_tokens))
        self.live = live
        self.prefill_budget = prefill_budget
        # None: every admission may prefill the whole budget; else paced to a share of a decode step
        self.pacer = PrefillPacer(prefill_share, prefill_budget) if prefill_share is not None else None
        self.max_len = stop.max_new_tokens  # the context bound: every step setting carries it
        self.step_start: dict[int, int] = {}  # slot -> its generated tokens before this step's
        self.settings: dict[int, SamplingParams] = {}  # request index -> how its rows draw
        self.scored: set[int] = set()  # request indices that asked for log-probabilities
        self.mixed_steps = 0  # steps whose rows drew with more than one setting
        self.waiting: set[int] = set()  # requests whose rows wait out this step (`_short_first`)
        self.waited = 0  # steps in a row that long requests' rows have waited
        self.prefixes = ScoredPrefixes(self.runner, share=self.prefixes.share)
        self.prefilling = ChunkedPrefills(self.prefixes, self.stats)  # prompts fed a chunk per step
        self.listeners.append(LiveSinks(self))

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
        (`quench.engine.serving.prefill_pacer`); the first tokens are drawn per setting."""
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
            self.settings[entry.index] = entry.row_sampling(self.max_len)
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
        by_setting: dict[SamplingParams, list[tuple[int, WorkItem]]] = defaultdict(list)
        for slot, item in items:
            by_setting[self.settings[item.request_index]].append((slot, item))
        for setting, group in by_setting.items():
            self.sampling = setting
            yield from self.start_rows(group)
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
        if isinstance(self.prefixes, ScoredPrefixes):
            self.prefixes.handed.pop(request_index, None)

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
            entry = self.live.entry(index)
            most = entry.sampling.max_new_tokens if entry is not None else self.max_len
            unstarted = entry.request.n - entry.started if entry is not None else 0
            left[index] = sum(max(0, most - len(row.generated)) for row in rows) + unstarted * most
        short = {index for index, tokens in left.items() if tokens <= SHORT_REQUEST}
        if not short or len(short) == len(left) or self.waited >= MAX_WAIT_STEPS:
            self.waited = 0
            return set()
        self.waited += 1
        return set(left) - short

    def step(self) -> Iterator[GenerationResult]:
        began = time.perf_counter()
        yield from self._step()
        if self.pacer is not None:
            self.pacer.stepped(time.perf_counter() - began)

    def _step(self) -> Iterator[GenerationResult]:
        self.waiting = self._short_first()
        rows = self.stepping()
        active = [b for b, row in enumerate(rows) if row is not None]
        settings = {self.settings[self.slots[b].request_index] for b in active}
        self.runner.recording = any(self.slots[b].request_index in self.scored for b in active)  # type: ignore[attr-defined]
        self.step_start = {b: len(self.slots[b].generated) for b in active}
        if len(settings) == 1:
            self.sampling = settings.pop()  # every row draws alike: the loop's own step, speculation included
            yield from super().step()
        else:
            yield from self._mixed_step(active)

    def _mixed_step(self, active: list[int]) -> Iterator[GenerationResult]:
        """A regular step (no drafts) over rows with several settings: one forward, then each row's token
        from its own setting's path on its own logits (as the same row would draw alone)."""
        rows = self.stepping()
        inputs = torch.tensor([[row.last if row is not None else 0] for row in rows])  # (B, 1)
        counts = torch.tensor([int(row is not None) for row in rows])  # (B,)
        start = torch.tensor([row.length if row is not None else 0 for row in rows])  # (B,)
        if self.guard is not None:
            logits, hidden = self.runner.forward(self.cache, inputs, start, counts=counts, hidden=True)  # (B, 1, V)
            logits = logits[active, 0]  # (A, V)
        else:
            logits = self.runner.packed_logits(self.cache, inputs, start, counts=counts)  # (A, V)
        verdict = Verdict(torch.zeros(len(active), dtype=torch.long), self._draw(logits, active)[:, None])
        keeps: list[int | None] = [None] * len(self.slots)
        if self.guard is not None:
            keeps = self.guard.step(hidden, fed_tokens(inputs, verdict, active))
        self.stats.steps += 1
        self.mixed_steps += 1
        yield from self.commit(verdict, StepPlan(active), keeps)

    def _draw(self, logits: torch.Tensor, active: Sequence[int]) -> torch.Tensor:
        """logits (A, V), row j of slot active[j] -> tokens (A,), each drawn with its request's setting."""
        rows_of: dict[SamplingParams, list[int]] = defaultdict(list)
        for j, b in enumerate(active):
            rows_of[self.settings[self.slots[b].request_index]].append(j)
        tokens = torch.empty(len(active), dtype=torch.long)  # (A,)
        for setting, rows in rows_of.items():
            chosen = torch.tensor(rows)  # (R,)
            generators = [self.slots[active[j]].generator for j in rows]
            tokens[chosen] = next_tokens(logits, setting, generators, rows=chosen)
        return tokens
