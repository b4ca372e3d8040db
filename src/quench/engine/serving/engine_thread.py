"""`LiveEngine`: the live loop over one queue, in a thread of the caller's process (or, in the engine
process, on its main thread: `quench.engine.serving.engine_core`)."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Callable, Sequence

from quench.engine.backend import QuenchBackend
from quench.engine.kv_cache import round_up
from quench.engine.rows import Row, StopRules
from quench.engine.serving.events import Failed, Sink, notify
from quench.engine.serving.gauges import EngineGauges, read_gauges
from quench.engine.serving.live_queue import LiveQueue
from quench.engine.serving.loop import PREFILL_BUDGET, LiveLoop
from quench.engine.types import GenerationRequest, SamplingParams

log = logging.getLogger(__name__)


class AfterCommit:
    """A listener that calls `flush` once a step's events went to the sinks (the engine process sends them)."""

    def __init__(self, flush: Callable[[], None]) -> None:
        self.flush = flush

    def on_token(self, slot: int, row: Row, token: int) -> None:
        pass

    def on_commit(self, slots: Sequence[Row | None]) -> None:
        self.flush()

    def on_finish(self, slot: int, row: Row, result) -> None:
        pass


@dataclass
class LiveEngine:
    """The live loop decoding every submitted request on `backend`; rows need at most `max_len` positions.
    `start` runs it in a thread; `serve` runs it in the calling thread until `stop`."""

    backend: QuenchBackend
    max_len: int  # prompt + generated tokens of one row, at most (the server's context length)
    max_waiting: int = 256
    prefill_budget: int = PREFILL_BUDGET  # prompt tokens prefilled per step, at most (quench.engine.serving.live)
    prefill_share: float | None = None  # while rows decode, prefill per step paced to this share of a step (prefill_pacer)
    flush: Callable[[], None] | None = None  # called after each step's events, and after a failure's
    queue: LiveQueue = field(init=False)
    loop: LiveLoop | None = field(default=None, init=False)  # the latest decode loop (its `stats`)
    _thread: threading.Thread | None = field(default=None, init=False)
    _drafts_before: tuple[int, int] = field(default=(0, 0), init=False)  # (drafted, accepted) of loops that ended

    def __post_init__(self) -> None:
        self.queue = LiveQueue(self.max_waiting)

    def start(self) -> "LiveEngine":
        self._thread = threading.Thread(target=self.serve, name="quench-engine", daemon=True)
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

    def gauges(self) -> EngineGauges:
        """What the engine holds now (a moment's snapshot, read without stopping it)."""
        return read_gauges(self.queue, self.loop, self.backend.config.batch_size, self.draft_totals())

    def stop(self, timeout: float = 10.0) -> None:
        """Take no more requests, fail the ones still held, and wait for the thread to end."""
        for entry in self.queue.close():
            notify(entry, Failed("the server is shutting down"))
        self._flush()
        if self._thread is not None:
            self._thread.join(timeout)

    def serve(self) -> None:
        """Run loops over the queue until it closes: one loop while requests keep coming, a fresh one after idling."""
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
                self._flush()

    def _flush(self) -> None:
        if self.flush is not None:
            self.flush()

    def _loop(self) -> LiveLoop:
        backend = self.backend
        loop = LiveLoop(
            backend.loop_parts(round_up(self.max_len + backend.config.row_headroom, 64)),
            self.queue,
            StopRules(backend.tokenizer, backend.eos_ids, self.max_len),  # each row's own limits apply within
            self.prefill_budget,
            self.prefill_share,
        )
        if self.flush is not None:
            loop.listeners.append(AfterCommit(self.flush))  # after `LiveSinks`: the step's events are out
        return loop

    def _fail_running(self, loop: LiveLoop, message: str) -> None:
        """Fail the requests of a loop that raised; requests still waiting get a fresh loop."""
        running = {row.request_index for row in loop.slots if row is not None} | set(loop.prefilling)
        loop.slots = [None] * len(loop.slots)  # the loop is dropped: no row of it runs any more
        loop.prefilling.drop(running)
        for index in running:
            entry = self.queue.remove(index)
            if entry is not None and not entry.cancelled:
                notify(entry, Failed(message))
