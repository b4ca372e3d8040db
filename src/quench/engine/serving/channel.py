"""The messages between the front end and the engine process, over one `multiprocessing` pipe.

Front end -> engine: `Submit`, `Cancel`, `Stop`. Engine -> front end: `Ready` once the model is loaded,
then one `StepEvents` per step that produced any: every request's events of that step in one message
(one pickle, one write), the requests that took their first slot, and the engine's gauges.
Tickets are the front end's: the engine process maps them to its queue's indices.
"""

from __future__ import annotations

from dataclasses import dataclass

from quench.engine.serving.events import LiveEvent
from quench.engine.serving.gauges import EngineGauges
from quench.engine.types import GenerationRequest, SamplingParams


@dataclass(frozen=True)
class Submit:
    ticket: int
    request: GenerationRequest
    sampling: SamplingParams
    top_logprobs: int | None = None


@dataclass(frozen=True)
class Cancel:
    ticket: int


@dataclass(frozen=True)
class Stop:
    """Take no more requests, fail the held ones ("shutting down"), send their events and exit."""


@dataclass(frozen=True)
class Ready:
    slots: int  # the engine's batch slots
    error: str | None = None  # the backend did not load: why (the process then exits)


@dataclass(frozen=True)
class StepEvents:
    events: tuple[tuple[int, LiveEvent], ...]  # (ticket, event), in the order the sinks were told
    started: tuple[int, ...]  # tickets whose first sample took a slot (no longer waiting)
    gauges: EngineGauges
    flush_s: float  # CPU seconds the engine's loop thread spent on its previous message (gathering, pickling, writing)
    sent: float  # time.perf_counter() when sent (CLOCK_MONOTONIC: comparable across processes)


ToEngine = Submit | Cancel | Stop
FromEngine = Ready | StepEvents
