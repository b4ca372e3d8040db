"""The live engine's queue: requests submitted from other threads, and which sample takes a free slot.

Admission is fair between requests (round-robin over requests, not over samples):
- a free slot goes to the waiting request with the fewest rows running (ties: the oldest), so a
  request's n samples share the batch with whatever else waits instead of taking every slot;
- the last free slot goes only to a request with no row running yet, so a request that arrives while
  another's n samples run finds a slot at the next step instead of waiting for one of them to finish
  (up to its max_tokens). No row is ever preempted: nothing already streamed is taken back.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

from quench.engine.scheduler import WorkItem
from quench.engine.types import GenerationRequest, SamplingParams


class QueueFull(Exception):
    """More requests wait than the queue holds."""


class EngineStopped(Exception):
    """The engine no longer takes requests (shutting down)."""


@dataclass
class LiveEntry:
    """A submitted request and what has happened to it."""

    index: int  # the request index the decode loop sees (unique over the engine's life)
    request: GenerationRequest
    sampling: SamplingParams
    sink: Callable  # quench.engine.serving.live.Sink
    top_logprobs: int | None = None  # None: no log-probabilities; else this many alternatives per token
    started: int = 0  # samples started
    finished: int = 0
    cancelled: bool = False

    @property
    def waiting(self) -> bool:
        return self.started < self.request.n and not self.cancelled

    @property
    def running(self) -> int:
        """Rows of this request in the batch now."""
        return self.started - self.finished


class LiveQueue:
    """A thread-safe `WorkQueue` that grows while the loop runs, handing out samples fairly (module docstring)."""

    def __init__(self, max_waiting: int, on_start: Callable[[int], None] | None = None) -> None:
        self.max_waiting = max_waiting  # requests not started yet; beyond that `add` raises QueueFull
        self.on_start = on_start  # told the index of each request whose first sample takes a slot
        self.closed = False
        self._entries: OrderedDict[int, LiveEntry] = OrderedDict()
        self._next_index = 0
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)

    def add(self, request: GenerationRequest, sampling: SamplingParams, sink: Callable,
            top_logprobs: int | None = None) -> int:
        with self._lock:
            if self.closed:
                raise EngineStopped("the engine is shutting down")
            if self._waiting_requests() >= self.max_waiting:
                raise QueueFull(f"{self.max_waiting} requests are already waiting")
            index = self._next_index
            self._next_index += 1
            self._entries[index] = LiveEntry(index, request, sampling, sink, top_logprobs)
            self._changed.notify_all()
            return index

    def _waiting_requests(self) -> int:
        return sum(1 for e in self._entries.values() if e.started == 0 and not e.cancelled)

    def cancel(self, index: int) -> None:
        with self._lock:
            entry = self._entries.get(index)
            if entry is not None and entry.started == 0:
                del self._entries[index]  # no row of it runs: nothing for the loop to free
            elif entry is not None:
                entry.cancelled = True

    def next_entry(self, free_slots: int) -> LiveEntry | None:
        """The request whose sample should take one of `free_slots` free slots (module docstring), or None."""
        with self._lock:
            if self.closed:
                return None
            entry = min((e for e in self._entries.values() if e.waiting), key=lambda e: (e.running, e.index),
                        default=None)
            if entry is None or (free_slots <= 1 and entry.running > 0):
                return None
            return entry

    def take(self, entry: LiveEntry) -> WorkItem | None:
        """Start the next sample of `entry` (None if it was cancelled or started them all meanwhile)."""
        with self._lock:
            if self.closed or not entry.waiting:
                return None
            sample = entry.request.sample_offset + entry.started
            entry.started += 1
            if entry.started == 1 and self.on_start is not None:
                self.on_start(entry.index)
            return WorkItem(entry.index, entry.request, sample)

    def pop(self) -> WorkItem | None:
        """The `WorkQueue` interface: the next sample as if every slot were free."""
        entry = self.next_entry(free_slots=2)
        return self.take(entry) if entry is not None else None

    def pending(self, request_index: int) -> bool:
        with self._lock:
            entry = self._entries.get(request_index)
            return entry is not None and entry.waiting and not self.closed

    def wait_for_work(self, timeout: float) -> bool:
        """Block until a request waits (or `timeout`); whether one does."""
        with self._lock:
            return self._changed.wait_for(
                lambda: self.closed or any(e.waiting for e in self._entries.values()), timeout) and not self.closed

    def held(self) -> int:
        """Requests submitted and not yet finished, failed or dropped after a cancel."""
        with self._lock:
            return len(self._entries)

    def counts(self) -> tuple[int, int]:
        """(requests with a row running, requests with no row started yet) for the operator's view."""
        with self._lock:
            live = [e for e in self._entries.values() if not e.cancelled]
            return sum(1 for e in live if e.running > 0), sum(1 for e in live if e.started == 0)

    def entry(self, index: int) -> LiveEntry | None:
        with self._lock:
            return self._entries.get(index)

    def cancelled(self) -> list[int]:
        with self._lock:
            return [e.index for e in self._entries.values() if e.cancelled]

    def finish(self, index: int) -> bool:
        """Count a finished sample of request `index`; whether it was the request's last (the request then
        leaves the queue). A cancelled request's samples count nothing: the loop drops it."""
        with self._lock:
            entry = self._entries.get(index)
            if entry is None or entry.cancelled:
                return False
            entry.finished += 1
            if entry.finished < entry.request.n:
                return False
            del self._entries[index]
            return True

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
