"""How many tokens to draft next: a fixed length, or BASS's dynamic length (docs/engine.md, "Draft length").

BASS (Qian et al., 2024, Algorithm 1 as reported): start at l = 7. After each step, if the longest
accepted run in the batch used the whole draft, grow: l = min(l + 2, l_max) and reset s = 0;
otherwise shrink: l = max(1, max accepted, l - ceil(l / 10) - s) and set s = 1, so a second miss
in a row shrinks one token faster.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import torch


class DraftLengthPolicy(Protocol):
    @property
    def current(self) -> int: ...

    def update(self, num_accepted: torch.Tensor, active: torch.Tensor) -> None:
        """num_accepted (B,) from the last verification; active (B,) bool rows that took part."""
        ...


@dataclass
class FixedDraftLength:
    length: int

    @property
    def current(self) -> int:
        return self.length

    def update(self, num_accepted: torch.Tensor, active: torch.Tensor) -> None:
        return None


@dataclass
class BassDraftLength:
    initial: int = 7
    maximum: int = 32
    _length: int = field(init=False)
    _shrink_streak: int = field(init=False, default=0)  # BASS's s

    def __post_init__(self) -> None:
        self._length = self.initial

    @property
    def current(self) -> int:
        return self._length

    def update(self, num_accepted: torch.Tensor, active: torch.Tensor) -> None:
        if not bool(active.any()):
            return
        best = int(num_accepted[active].max())
        if best >= self._length:
            self._length = min(self._length + 2, self.maximum)
            self._shrink_streak = 0
        else:
            shrunk = self._length - math.ceil(self._length / 10) - self._shrink_streak
            self._length = max(1, best, shrunk)
            self._shrink_streak = 1


def make_policy(kind: str, length: int, maximum: int) -> DraftLengthPolicy:
    """'fixed' (always `length`) or 'bass' (dynamic, starting at `length`, at most `maximum`)."""
    if kind == "fixed":
        return FixedDraftLength(length)
    if kind == "bass":
        return BassDraftLength(initial=length, maximum=maximum)
    raise ValueError(f"draft length policy must be 'fixed' or 'bass', got {kind!r}")
