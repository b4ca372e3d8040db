"""How code outside the decode loop plugs into it: stop observers, which decide, and listeners, which watch.

Stop observers (e.g. GenGuard): each step the loop hands the observer the target's final-norm hidden
states (what the LM head reads) at every position it fed, and the tokens fed there; the observer
answers, per row, whether the row stops and how many of its generated tokens it keeps.

Listeners (e.g. the server's streaming, `quench.engine.serving.live`) are told what the loop does and
change nothing of the loop or its queue: each token as it is appended, each step once committed, each
sample as it finishes. What a finished sample means for its request is the loop's (`DecodeLoop.completed`,
called after the listeners). The engine knows only these protocols.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Sequence

    import torch

    from quench.engine.rows import Row
    from quench.engine.types import GenerationResult

PAD = -1  # token id of a position that is not part of its row (a rejected draft, a free slot)


@runtime_checkable
class RowStopper(Protocol):
    """An observer's state over one batch of slots."""

    def reset(self, slot: int) -> None:
        """A new sequence starts in `slot`: forget what the slot's previous one fed."""
        ...

    def step(self, hidden: torch.Tensor, token_ids: torch.Tensor) -> list[int | None]:
        """hidden (B, T, D) at the positions where token_ids (B, T) were fed; PAD marks positions to skip.

        Returns, per row, None (go on) or the number of generated tokens to keep (the row stops there).
        A row's fed tokens are a prefix of its T positions.
        """
        ...


@runtime_checkable
class StopObserver(Protocol):
    """What `QuenchBackend(guard=...)` takes: one `RowStopper` per `generate` call."""

    def start(self, tokenizer: Any, slots: int) -> RowStopper:
        """A fresh per-slot state for a batch of `slots` rows decoded with `tokenizer`."""
        ...


@runtime_checkable
class LoopListener(Protocol):
    """What `DecodeLoop(listeners=...)` tells, in order, from the loop's thread; a listener only reads the loop and
    its queue (it may hand what it reads elsewhere: the server's sinks)."""

    def on_token(self, slot: int, row: Row, token: int) -> None:
        """`token` is about to be appended to `row` (in `slot`); the step's logits are still the runner's last.

        A guard that stops a row may take back tokens shown here: the finished result is what stays.
        """
        ...

    def on_commit(self, slots: Sequence[Row | None]) -> None:
        """A step's tokens are appended and the freed slots refilled (their first tokens appended too)."""
        ...

    def on_finish(self, slot: int, row: Row, result: GenerationResult) -> None:
        """`row` has left `slot`, finished as `result` (the value the loop yields next); the loop completes the
        sample's request after every listener was told."""
        ...
