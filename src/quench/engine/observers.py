"""Hidden-state observers: how a stopping model (e.g. GenGuard) plugs into the decode loop.

Each step the loop hands the observer the target's final-norm hidden states (what the LM head
reads) at every position it fed, and the tokens fed there; the observer answers, per row, whether
the row stops and how many of its generated tokens it keeps. The engine knows only this protocol.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch

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
