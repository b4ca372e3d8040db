"""Serving: requests that arrive while the engine decodes join the running batch at its next step.

`LiveEngine` owns the model in one thread. Callers `submit` a request with its own sampling settings
and a sink; the thread calls the sink with each sample's new tokens after every step (`Tokens`), with
each finished sample (`Finished`) and, if the engine fails, once with `Failed`. `cancel` frees the
request's rows at the next step.

Rows of one batch share temperature, top-p and top-k (one sampling path per step). Requests whose
settings differ from the running batch's wait until it drains; meanwhile no new request of the running
settings is admitted, so no request waits behind a stream of others. `max_new_tokens` and the seed are
per request: the first through `LiveStopRules`, the second through the request key (each row's
generator is seeded from the key and the sample index, `quench.engine.sampling.row_generator`).
Requests that ask for log-probabilities (`quench.engine.logprobs`) run in batches of their own.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Iterator

from quench.engine.decode import DecodeLoop
from quench.engine.draft_length import make_policy
from quench.engine.engine import QuenchBackend
from quench.engine.holdback import GUARD_HOLDBACK, settled_text, tokens_before
from quench.engine.kv_cache import round_up
from quench.engine.logprobs import ScoredPrefixes, ScoringRunner, TokenLogprob, score_token
from quench.engine.rows import Row, StopRules
from quench.engine.scheduler import WorkItem
from quench.engine.types import GenerationRequest, GenerationResult, SamplingParams

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


class QueueFull(Exception):
    """More requests wait than the queue holds."""


class EngineStopped(Exception):
    """The engine no longer takes requests (shutting down)."""


Group = tuple[float, float, int, bool]  # temperature, top-p, top-k, log-probabilities wanted


def batch_group(sampling: SamplingParams, scored: bool = False) -> Group:
    """The settings rows of one batch must share: greedy rows all decode together."""
    if sampling.greedy:
        return (0.0, 1.0, 0, scored)
    return (sampling.temperature, sampling.top_p, sampling.top_k, scored)


@dataclass
class LiveEntry:
    """A submitted request and what has happened to it."""

    index: int  # the request index the decode loop sees (unique over the engine's life)
    request: GenerationRequest
    sampling: SamplingParams
    sink: Sink
    top_logprobs: int | None = None  # None: no log-probabilities; else this many alternatives per token
    started: int = 0  # samples started
    finished: int = 0
    cancelled: bool = False

    @property
    def group(self) -> Group:
        return batch_group(self.sampling, self.top_logprobs is not None)

    @property
    def waiting(self) -> bool:
        return self.started < self.request.n and not self.cancelled


class LiveQueue:
    """A thread-safe `WorkQueue` that grows while the loop runs; `pop` hands out only the current group."""

    def __init__(self, max_waiting: int) -> None:
        self.max_waiting = max_waiting  # requests not started yet; beyond that `add` raises QueueFull
        self.closed = False
        self.group: Group | None = None  # of the running loop
        self._entries: OrderedDict[int, LiveEntry] = OrderedDict()
        self._next_index = 0
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)

    def add(self, request: GenerationRequest, sampling: SamplingParams, sink: Sink, top_logprobs: int | None = None) -> int:
        with self._lock:
            if self.closed:
                raise EngineStopped("the engine is shutting down")
            if sum(1 for e in self._entries.values() if e.started == 0 and not e.cancelled) >= self.max_waiting:
                raise QueueFull(f"{self.max_waiting} requests are already waiting")
            index = self._next_index
            self._next_index += 1
            self._entries[index] = LiveEntry(index, request, sampling, sink, top_logprobs)
            self._changed.notify_all()
            return index

    def cancel(self, index: int) -> None:
        with self._lock:
            entry = self._entries.get(index)
            if entry is not None and entry.started == 0:
                del self._entries[index]  # no row of it runs: nothing for the loop to free
            elif entry is not None:
                entry.cancelled = True

    def pop(self) -> WorkItem | None:
        """The next sample of the oldest waiting request, if it belongs to the running group."""
        with self._lock:
            if self.closed:
                return None
            entry = next((e for e in self._entries.values() if e.waiting), None)
            if entry is None or entry.group != self.group:
                return None
            sample = entry.request.sample_offset + entry.started
            entry.started += 1
            return WorkItem(entry.index, entry.request, sample)

    def pending(self, request_index: int) -> bool:
        with self._lock:
            entry = self._entries.get(request_index)
            return entry is not None and entry.waiting and not self.closed

    def wait_for_group(self, timeout: float) -> LiveEntry | None:
        """Block until a request waits (or `timeout`); the oldest waiting one (its settings start the next loop)."""
        with self._lock:
            self._changed.wait_for(lambda: self.closed or any(e.waiting for e in self._entries.values()), timeout)
            entry = next((e for e in self._entries.values() if e.waiting), None)
            return None if entry is None or self.closed else entry

    def held(self) -> int:
        """Requests submitted and not yet finished, failed or dropped after a cancel."""
        with self._lock:
            return len(self._entries)

    def entry(self, index: int) -> LiveEntry | None:
        with self._lock:
            return self._entries.get(index)

    def cancelled(self) -> list[int]:
        with self._lock:
            return [e.index for e in self._entries.values() if e.cancelled]

    def remove(self, index: int) -> LiveEntry | None:
        with self._lock:
            return self._entries.pop(index, None)

    def close(self) -> list[LiveEntry]:
        """Take no more requests and cancel the ones held (the loop drops their rows); those not cancelled before."""
        with self._lock:
            self.closed = True
            live = [e for e in self._entries.values() if not e.cancelled]
            for entry in live:
                entry.cancelled = True
            self._changed.notify_all()
            return live


def notify(entry: LiveEntry, event: LiveEvent) -> None:
    """Hand an event to a request's sink; a sink that fails costs its request only."""
    try:
        entry.sink(event)
    except Exception:
        log.exception("request %d: its sink failed; cancelling it", entry.index)
        entry.cancelled = True


class LiveStopRules(StopRules):
    """StopRules with each request's own `max_new_tokens` (the loop-wide one is the context bound)."""

    def __init__(self, tokenizer, eos_ids: frozenset[int], max_new_tokens: int, queue: LiveQueue) -> None:
        super().__init__(tokenizer, eos_ids, max_new_tokens)
        self.queue = queue
        self.on_token: Callable[[Row, int], None] | None = None  # sees each token before it is appended

    def append(self, row: Row, token: int) -> str | None:
        if self.on_token is not None:
            self.on_token(row, token)
        reason = super().append(row, token)
        entry = self.queue.entry(row.request_index)
        if reason is None and entry is not None and len(row.generated) >= entry.sampling.max_new_tokens:
            return "length"
        return reason


class LiveLoop(DecodeLoop):
    """A decode loop over a `LiveQueue`: drops cancelled rows and publishes new tokens every step.

    scored: its rows want log-probabilities; its runner is a `ScoringRunner` and its stop rules a
    `LiveStopRules`, through which each committed token is scored."""

    def __init__(self, *args, live: LiveQueue, scored: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.live = live
        self.published: dict[tuple[int, int], int] = {}  # (request index, sample index) -> tokens published
        self.pieces: dict[tuple[int, int], list[str]] = {}  # with a guard: each generated token's text
        self.scores: dict[tuple[int, int], list[TokenLogprob]] | None = None  # scored: per sample, per token
        self.step_start: dict[int, int] = {}  # scored: slot -> its generated tokens before this step's
        if scored:
            self.scores = {}
            self.prefixes = ScoredPrefixes(self.runner, share=self.prefixes.share)
            self.stop.on_token = self._score  # type: ignore[attr-defined]

    def _score(self, row: Row, token: int) -> None:
        """Keep the log-probability of `token`, about to be appended to `row` (see quench.engine.logprobs)."""
        assert self.scores is not None and isinstance(self.prefixes, ScoredPrefixes)
        entry = self.live.entry(row.request_index)
        top = (entry.top_logprobs or 0) if entry is not None else 0
        if not row.generated:  # the first token: from the prompt's logits
            logits = self.prefixes.handed[row.request_index]
        else:
            slot = next(b for b, other in enumerate(self.slots) if other is row)
            last = self.runner.last  # type: ignore[attr-defined]
            logits = last.at(slot, len(row.generated) - self.step_start[slot])
        self.scores.setdefault((row.request_index, row.sample_index), []).append(score_token(logits, token, top))

    def _commit(self, verdict, draft, width, active, keeps) -> Iterator[GenerationResult]:
        if self.scores is not None:
            self.step_start = {b: len(self.slots[b].generated) for b in active}
        yield from super()._commit(verdict, draft, width, active, keeps)

    def _logprobs(self, key: tuple[int, int], start: int, end: int) -> tuple[TokenLogprob, ...] | None:
        return None if self.scores is None else tuple(self.scores.get(key, ())[start:end])

    def run(self) -> Iterator[GenerationResult]:
        while True:
            self._drop_cancelled()
            yield from self._admit()
            self._publish()
            if all(row is None for row in self.slots):
                return
            yield from self._step()

    def _drop_cancelled(self) -> None:
        cancelled = set(self.live.cancelled())
        if not cancelled:
            return
        for slot, row in enumerate(self.slots):
            if row is not None and row.request_index in cancelled:
                self.slots[slot] = None  # a free slot: the next `_admit` refills it
        for index in cancelled:
            self.prefixes.release(index)
            self._forget(index)
            if self.drafter is not None:
                self.drafter.release(index)
            self.live.remove(index)

    def _publish(self) -> None:
        for row in self.slots:
            if row is None:
                continue
            key = (row.request_index, row.sample_index)
            sent = self.published.get(key, 0)
            ready = len(row.generated) if self.guard is None else self._settled(key, row.generated)
            entry = self.live.entry(row.request_index)
            if ready > sent and entry is not None and not entry.cancelled:
                self.published[key] = ready
                notify(entry, Tokens(row.sample_index, tuple(row.generated[sent:ready]), self._logprobs(key, sent, ready)))

    def _settled(self, key: tuple[int, int], generated: list[int]) -> int:
        """How many of a guarded row's tokens the guard can no longer take back (see GUARD_HOLDBACK)."""
        pieces = self.pieces.setdefault(key, [])
        pieces.extend(self.stop.decode([token]) for token in generated[len(pieces):])
        return min(len(pieces) - GUARD_HOLDBACK, tokens_before(pieces, settled_text("".join(pieces))))

    def _finish(self, slot: int, reason: str) -> GenerationResult:
        """Finish the row as `DecodeLoop` does, and hand the sample to its request's sink."""
        row = self.slots[slot]
        assert row is not None
        result = super()._finish(slot, reason)
        key = (row.request_index, row.sample_index)
        self.published.pop(key, None)
        self.pieces.pop(key, None)
        logprobs = self._logprobs(key, 0, len(result.token_ids))
        if self.scores is not None:
            self.scores.pop(key, None)
        entry = self.live.entry(row.request_index)
        if entry is not None and not entry.cancelled:
            entry.finished += 1
            if entry.finished >= entry.request.n:
                self.live.remove(row.request_index)
                self._forget(row.request_index)
            notify(entry, Finished(result, logprobs))
        return result

    def _forget(self, request_index: int) -> None:
        if isinstance(self.prefixes, ScoredPrefixes):
            self.prefixes.handed.pop(request_index, None)


@dataclass
class LiveEngine:
    """One thread decoding every submitted request on `backend`; rows need at most `max_len` positions."""

    backend: QuenchBackend
    max_len: int  # prompt + generated tokens of one row, at most (the server's context length)
    max_waiting: int = 256
    queue: LiveQueue = field(init=False)
    loop: LiveLoop | None = field(default=None, init=False)  # the latest decode loop (its `stats`)
    _thread: threading.Thread | None = field(default=None, init=False)

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

    def stop(self, timeout: float = 10.0) -> None:
        """Take no more requests, fail the ones still held, and wait for the thread to end."""
        for entry in self.queue.close():
            notify(entry, Failed("the server is shutting down"))
        if self._thread is not None:
            self._thread.join(timeout)

    def _serve(self) -> None:
        while not self.queue.closed:
            oldest = self.queue.wait_for_group(timeout=0.5)
            if oldest is None:
                continue
            loop = self.loop = self._loop(oldest.sampling, oldest.top_logprobs is not None)
            try:
                for _ in loop.run():  # each result went to its request's sink
                    pass
            except Exception as err:  # the server outlives any one batch: fail its requests, go on
                log.exception("engine step failed")
                self._fail_running(loop, f"engine error: {err}")

    def _loop(self, sampling: SamplingParams, scored: bool) -> LiveLoop:
        backend, config = self.backend, self.backend.config
        self.queue.group = batch_group(sampling, scored)
        cache_len = round_up(self.max_len + config.row_headroom, 64)
        loop_sampling = SamplingParams(sampling.temperature, sampling.top_p, sampling.top_k, self.max_len, seed=0)
        guard = backend.guard.start(backend.tokenizer, config.batch_size) if backend.guard is not None else None
        return LiveLoop(
            ScoringRunner(backend.runner) if scored else backend.runner,
            backend._target_cache(cache_len),
            self.queue,
            LiveStopRules(backend.tokenizer, backend.eos_ids, self.max_len, self.queue),
            loop_sampling,
            drafter=backend._drafter(cache_len),
            policy=make_policy(config.draft_length, config.draft_tokens, config.max_draft_tokens)
            if config.drafter != "none" else None,
            guard=guard,
            share_prefixes=config.share_prefixes,
            max_draft_rows=config.draft_max_rows or None,
            live=self.queue,
            scored=scored,
        )

    def _fail_running(self, loop: LiveLoop, message: str) -> None:
        """Fail the requests of a loop that raised; requests still waiting get a fresh loop."""
        running = {row.request_index for row in loop.slots if row is not None}
        for index in running:
            entry = self.queue.remove(index)
            if entry is not None and not entry.cancelled:
                notify(entry, Failed(message))
