"""Serving: requests that arrive while the engine decodes join the running batch at its next step.

`LiveEngine` owns the model in one thread. Callers `submit` a request with its own sampling settings
and a sink; the thread calls the sink with each sample's new tokens after every step (`Tokens`), with
each finished sample (`Finished`) and, if the engine fails, once with `Failed`. `cancel` frees the
request's rows at the next step.

Every request shares one batch, whatever its settings:
- admission is fair between requests (`quench.engine.serving.live_queue`), and each step prefills at most
  `prefill_budget` prompt tokens, so a burst of arrivals or one long prompt costs the running rows one
  bounded stall per step instead of every prefill at once: a prompt longer than what is left of the
  budget is prefilled in chunks over the next steps (`quench.engine.serving.chunked_prefill`) where the runner
  promises the chunks the bits of a whole prefill, else whole (at least one prompt per step); its
  samples hold their slots meanwhile and draw their first tokens once it is in;
- short requests first: while a request with few tokens left (SHORT_REQUEST) runs beside long ones,
  the long ones' rows wait out the step with their caches kept (at most MAX_WAIT_STEPS in a row), so a
  small request is not slowed to the pace of a batch full of another's samples (`LiveLoop._short_first`);
- temperature, top-p and top-k are per row: a step whose rows all draw alike is the decode loop's own
  step (speculation included); a step with several settings is a regular step whose logits each row
  reads with its own (`LiveLoop._mixed_step`); greedy rows take the argmax of the same logits;
- `max_new_tokens` and `ignore_eos` per request through `LiveStopRules`, the seed through the request key (each row's
  generator is seeded from the key and the sample index, `quench.engine.sampling.row_generator`), so a
  sample's tokens do not depend on what else is in the batch (with batch-invariant kernels, bit for bit);
- log-probabilities (`quench.engine.logprobs`): the runner keeps a step's logits only when a row of
  that step asked for them (`RecordingRunner`), so other requests do not pay for them.

`LiveLoop` is the decode loop with the server's admission and steps; what reaches the sinks (tokens,
log-probabilities, finished samples) comes from `LiveSinks`, a listener on it (`quench.engine.observers.LoopListener`).
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, Sequence

import torch

from quench.engine.serving.chunked_prefill import ChunkedPrefills
from quench.engine.decode import DecodeLoop, LoopParts, StepPlan, fed_tokens
from quench.engine.engine import QuenchBackend
from quench.engine.holdback import GUARD_HOLDBACK, settled_text, tokens_before
from quench.engine.kv_cache import round_up
from quench.engine.serving.live_queue import EngineStopped, LiveEntry, LiveQueue, QueueFull
from quench.engine.logprobs import ScoredPrefixes, ScoringRunner, TokenLogprob, score_token
from quench.engine.rows import Row, StopRules
from quench.engine.sampling import next_tokens
from quench.engine.scheduler import WorkItem, splits_exactly
from quench.engine.types import GenerationRequest, GenerationResult, SamplingParams
from quench.engine.verify import Verdict

__all__ = ["EngineStopped", "Failed", "Finished", "LiveEngine", "LiveEvent", "QueueFull", "Tokens"]

PREFILL_BUDGET = 512  # prompt tokens prefilled per step, at most (a longer prompt goes in chunks over several)
SHORT_REQUEST = 256  # tokens left to generate over all of a request's samples, at most, for it to go first
MAX_WAIT_STEPS = 16  # a long request's rows wait at most this many steps in a row for short requests

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Tokens:
    """New tokens of one sample since the last `Tokens` event of that sample."""

    sample_index: int
    token_ids: tuple[int, ...]
    logprobs: tuple[TokenLogprob, ...] | None = None  # one per token, for a request that asked for them


@dataclass(frozen=True)
class Finished:
    result: GenerationResult
    logprobs: tuple[TokenLogprob, ...] | None = None  # one per token of result.token_ids


@dataclass(frozen=True)
class Failed:
    message: str


LiveEvent = Tokens | Finished | Failed
Sink = Callable[[LiveEvent], None]  # called from the engine thread


def notify(entry: LiveEntry, event: LiveEvent) -> None:
    """Hand an event to a request's sink; a sink that fails costs its request only."""
    try:
        entry.sink(event)
    except Exception:
        log.exception("request %d: its sink failed; cancelling it", entry.index)
        entry.cancelled = True


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
        self, parts: LoopParts, live: LiveQueue, stop: LiveStopRules, prefill_budget: int = PREFILL_BUDGET
    ) -> None:
        # each step draws with its rows' own settings (`step`); the loop-wide one carries the context bound
        super().__init__(replace(parts, runner=RecordingRunner(parts.runner)), live, stop,
                         SamplingParams(max_new_tokens=stop.max_new_tokens))
        self.live = live
        self.prefill_budget = prefill_budget
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
        `prefill_budget` prompt tokens in all (at least one prompt); the first tokens are drawn per setting."""
        self._drop_cancelled()
        items, spent = self.prefilling.advance(self.prefill_budget)
        taken = self.prefilling.held() | {slot for slot, _ in items}  # under way, or starting from a completed prompt
        free = [slot for slot, row in enumerate(self.slots) if row is None and slot not in taken]
        fresh: set[int] = set()  # requests whose prompt this admission prefills whole
        while free:
            entry = self.live.next_entry(len(free))
            if entry is None:
                break
            length, room = len(entry.request.prompt_ids), self.prefill_budget - spent
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


class LiveSinks:
    """The listener that serves a `LiveLoop`'s requests: each committed token's log-probability for rows that
    asked, new tokens to the sinks after every step (a guarded row's only once the guard cannot take them
    back), and each finished sample."""

    def __init__(self, loop: LiveLoop) -> None:
        self.loop = loop
        self.published: dict[tuple[int, int], int] = {}  # (request index, sample index) -> tokens published
        self.pieces: dict[tuple[int, int], list[str]] = {}  # with a guard: each generated token's text
        self.scores: dict[tuple[int, int], list[TokenLogprob]] = {}  # rows that asked: per sample, per token

    def on_token(self, slot: int, row: Row, token: int) -> None:
        """Keep the log-probability of `token`, about to be appended to `row` (see quench.engine.logprobs)."""
        loop = self.loop
        if row.request_index not in loop.scored:
            return
        assert isinstance(loop.prefixes, ScoredPrefixes)
        entry = loop.live.entry(row.request_index)
        top = (entry.top_logprobs or 0) if entry is not None else 0
        if not row.generated:  # the first token: from the prompt's logits
            logits = loop.prefixes.handed[row.request_index]
        else:
            last = loop.runner.last  # type: ignore[attr-defined]
            logits = last.at(slot, len(row.generated) - loop.step_start[slot])
        self.scores.setdefault((row.request_index, row.sample_index), []).append(score_token(logits, token, top))

    def on_commit(self, slots: Sequence[Row | None]) -> None:
        for row in slots:
            if row is None:
                continue
            key = (row.request_index, row.sample_index)
            sent = self.published.get(key, 0)
            ready = len(row.generated) if self.loop.guard is None else self._settled(key, row.generated)
            entry = self.loop.live.entry(row.request_index)
            if ready > sent and entry is not None and not entry.cancelled:
                self.published[key] = ready
                notify(entry, Tokens(row.sample_index, tuple(row.generated[sent:ready]), self._logprobs(key, sent, ready)))

    def on_finish(self, slot: int, row: Row, result: GenerationResult) -> None:
        """Hand the finished sample to its request's sink; the request ends with its last sample."""
        key = (row.request_index, row.sample_index)
        self.published.pop(key, None)
        self.pieces.pop(key, None)
        logprobs = self._logprobs(key, 0, len(result.token_ids))
        self.scores.pop(key, None)
        entry = self.loop.live.entry(row.request_index)
        if entry is not None and not entry.cancelled:
            entry.finished += 1
            if entry.finished >= entry.request.n:
                self.loop.live.remove(row.request_index)
                self.loop.forget(row.request_index)
            notify(entry, Finished(result, logprobs))

    def _settled(self, key: tuple[int, int], generated: list[int]) -> int:
        """How many of a guarded row's tokens the guard can no longer take back (see GUARD_HOLDBACK)."""
        pieces = self.pieces.setdefault(key, [])
        pieces.extend(self.loop.stop.decode([token]) for token in generated[len(pieces):])
        return min(len(pieces) - GUARD_HOLDBACK, tokens_before(pieces, settled_text("".join(pieces))))

    def _logprobs(self, key: tuple[int, int], start: int, end: int) -> tuple[TokenLogprob, ...] | None:
        return tuple(self.scores.get(key, ())[start:end]) if key[0] in self.loop.scored else None


@dataclass
class LiveEngine:
    """One thread decoding every submitted request on `backend`; rows need at most `max_len` positions."""

    backend: QuenchBackend
    max_len: int  # prompt + generated tokens of one row, at most (the server's context length)
    max_waiting: int = 256
    prefill_budget: int = PREFILL_BUDGET  # prompt tokens prefilled per step, at most (module docstring)
    queue: LiveQueue = field(init=False)
    loop: LiveLoop | None = field(default=None, init=False)  # the latest decode loop (its `stats`)
    _thread: threading.Thread | None = field(default=None, init=False)
    _drafts_before: tuple[int, int] = field(default=(0, 0), init=False)  # (drafted, accepted) of loops that ended

    def __post_init__(self) -> None:
        self.queue = LiveQueue(self.max_waiting)

    def start(self) -> "LiveEngine":
        self._thread = threading.Thread(target=self._serve, name="quench-engine", daemon=True)
        self._thread.start()
        return self

    def submit(self, request: GenerationRequest, sampling: SamplingParams, sink: Sink, top_logprobs: int | None = None) -> int:
        """Queue a request; its ticket for `cancel`. QueueFull or EngineStopped when it cannot wait.
        top_logprobs: None, or each token's log-probability with this many alternatives (at most MAX_TOP)."""
        if len(request.prompt_ids) + sampling.max_new_tokens > self.max_len:
            raise ValueError(f"{len(request.prompt_ids)} prompt + {sampling.max_new_tokens} new tokens > {self.max_len}")
        return self.queue.add(request, sampling, sink, top_logprobs)

    def cancel(self, ticket: int) -> None:
        self.queue.cancel(ticket)

    def accepting(self) -> bool:
        """Whether submitted requests will be served (not shutting down, the engine thread alive)."""
        return not self.queue.closed and self._thread is not None and self._thread.is_alive()

    def draft_totals(self) -> tuple[int, int]:
        """(draft tokens proposed, accepted) over the engine's life."""
        loop, (drafted, accepted) = self.loop, self._drafts_before
        return (drafted + loop.stats.drafted, accepted + loop.stats.accepted) if loop is not None else (drafted, accepted)

    def stop(self, timeout: float = 10.0) -> None:
        """Take no more requests, fail the ones still held, and wait for the thread to end."""
        for entry in self.queue.close():
            notify(entry, Failed("the server is shutting down"))
        if self._thread is not None:
            self._thread.join(timeout)

    def _serve(self) -> None:
        while not self.queue.closed:
            if not self.queue.wait_for_work(timeout=0.5):
                continue
            self._drafts_before = self.draft_totals()
            loop = self.loop = self._loop()
            try:
                for _ in loop.run():  # each result went to its request's sink
                    pass
            except Exception as err:  # the server outlives any one batch: fail its requests, go on
                log.exception("engine step failed")
                self._fail_running(loop, f"engine error: {err}")


    def _loop(self) -> LiveLoop:
        backend = self.backend
        return LiveLoop(
            backend.loop_parts(round_up(self.max_len + backend.config.row_headroom, 64)),
            self.queue,
            LiveStopRules(backend.tokenizer, backend.eos_ids, self.max_len, self.queue),
            self.prefill_budget,
        )

    def _fail_running(self, loop: LiveLoop, message: str) -> None:
        """Fail the requests of a loop that raised; requests still waiting get a fresh loop."""
        running = {row.request_index for row in loop.slots if row is not None} | set(loop.prefilling)
        loop.slots = [None] * len(loop.slots)  # the loop is dropped: no row of it runs any more
        loop.prefilling.drop(running)
        for index in running:
            entry = self.queue.remove(index)
            if entry is not None and not entry.cancelled:
                notify(entry, Failed(message))
