"""The listener that serves a live loop's requests: tokens, log-probabilities and finished samples to their sinks."""

from __future__ import annotations

from typing import Any, Protocol, Sequence

import torch

from quench.engine.holdback import GUARD_HOLDBACK, settled_text, tokens_before
from quench.engine.logprobs import TokenLogprob, score_token
from quench.engine.rows import Row, StopRules
from quench.engine.serving.events import Finished, Tokens, notify
from quench.engine.serving.live_queue import LiveQueue
from quench.engine.types import GenerationResult


class ServedLoop(Protocol):
    """What the sinks read of the live loop (`quench.engine.serving.loop.LiveLoop`), which imports them."""

    scored: set[int]  # request indices whose rows asked for log-probabilities
    live: LiveQueue
    guard: Any
    stop: StopRules  # the loop's stop rules (their decode)

    def token_logits(self, slot: int, row: Row) -> torch.Tensor:
        """logits (V,) of the position that predicts the token about to be appended to `row` (a scored row)."""
        ...


class LiveSinks:
    """The listener that serves a `LiveLoop`'s requests: each committed token's log-probability for rows that
    asked, new tokens to the sinks after every step (a guarded row's only once the guard cannot take them
    back), and each finished sample. It reads the loop and the queue and writes only to the sinks and its own
    records; the loop ends a request once its last sample was handed out (`LiveLoop.completed`)."""

    def __init__(self, loop: ServedLoop) -> None:
        self.loop = loop
        self.published: dict[tuple[int, int], int] = {}  # (request index, sample index) -> tokens published
        self.pieces: dict[tuple[int, int], list[str]] = {}  # with a guard: each generated token's text
        self.scores: dict[tuple[int, int], list[TokenLogprob]] = {}  # rows that asked: per sample, per token

    def on_token(self, slot: int, row: Row, token: int) -> None:
        """Keep the log-probability of `token`, about to be appended to `row` (see quench.engine.logprobs)."""
        loop = self.loop
        if row.request_index not in loop.scored:
            return
        entry = loop.live.entry(row.request_index)
        top = (entry.top_logprobs or 0) if entry is not None else 0
        logits = loop.token_logits(slot, row)  # (V,)
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
        """Hand the finished sample to its request's sink."""
        key = (row.request_index, row.sample_index)
        self.published.pop(key, None)
        self.pieces.pop(key, None)
        logprobs = self._logprobs(key, 0, len(result.token_ids))
        self.scores.pop(key, None)
        entry = self.loop.live.entry(row.request_index)
        if entry is not None and not entry.cancelled:
            notify(entry, Finished(result, logprobs))

    def _settled(self, key: tuple[int, int], generated: list[int]) -> int:
        """How many of a guarded row's tokens the guard can no longer take back (see GUARD_HOLDBACK)."""
        pieces = self.pieces.setdefault(key, [])
        pieces.extend(self.loop.stop.decode([token]) for token in generated[len(pieces):])
        return min(len(pieces) - GUARD_HOLDBACK, tokens_before(pieces, settled_text("".join(pieces))))

    def _logprobs(self, key: tuple[int, int], start: int, end: int) -> tuple[TokenLogprob, ...] | None:
        return tuple(self.scores.get(key, ())[start:end]) if key[0] in self.loop.scored else None
