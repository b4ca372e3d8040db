"""What the live engine tells a request's sink: new tokens, a finished sample, or a failure."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

from quench.engine.logprobs import TokenLogprob
from quench.engine.serving.live_queue import LiveEntry
from quench.engine.types import GenerationResult

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
Sink = Callable[[LiveEvent], None]  # called from the engine's thread (or the engine process's reader)


def notify(entry: LiveEntry, event: LiveEvent) -> None:
    """Hand an event to a request's sink; a sink that fails costs its request only."""
    try:
        entry.sink(event)
    except Exception:
        log.exception("request %d: its sink failed; cancelling it", entry.index)
        entry.cancelled = True
