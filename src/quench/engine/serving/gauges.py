"""What a live engine holds at one moment, for the operator's view (`/metrics`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from quench.engine.serving.live_queue import LiveQueue
    from quench.engine.serving.loop import LiveLoop


@dataclass(frozen=True)
class EngineGauges:
    """What the engine holds at one moment."""

    requests_running: int
    requests_waiting: int
    rows_running: int
    rows_waiting: int  # of rows_running, those that wait out steps for short requests
    slots: int
    kv_cache_usage: float  # positions of running rows / positions the cache holds
    drafted: int  # draft tokens proposed, over the engine's life
    accepted: int


def read_gauges(queue: LiveQueue, loop: LiveLoop | None, slots: int, drafts: tuple[int, int]) -> EngineGauges:
    """The gauges of a queue and its latest loop, read without stopping it (a moment's snapshot).
    drafts: (draft tokens proposed, accepted) over the engine's life."""
    running, waiting = queue.counts()
    rows = [row for row in loop.slots if row is not None] if loop is not None else []
    capacity = slots * loop.cache.max_len if loop is not None else 0
    used = sum(row.length for row in rows)
    paused = loop.waiting if loop is not None else set()  # replaced, never changed in place: a safe read
    return EngineGauges(running, waiting, len(rows), sum(row.request_index in paused for row in rows), slots,
                        used / capacity if capacity else 0.0, *drafts)
