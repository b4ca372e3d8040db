"""How many tokens to draft next: a fixed length, BASS's dynamic length, or the length that measured acceptance and
step times say yields the most tokens per second (docs/engine.md, "Draft length").

BASS (Qian et al., 2024, Algorithm 1 as reported): start at l = 7. After each step, if the longest
accepted run in the batch used the whole draft, grow: l = min(l + 2, l_max) and reset s = 0;
otherwise shrink: l = max(1, max accepted, l - ceil(l / 10) - s) and set s = 1, so a second miss
in a row shrinks one token faster.

Measured (`MeasuredDraftLength`): the engine times each step and counts the positions F it fed; `StepCost` turns
those into t(F), the expected time of a step feeding F positions, and per-position acceptance counts give E(l), the
tokens a drafting row gains beyond its bonus token with a draft of l. The next length is the l (0 included: no
draft) with the most tokens per second, (B + r B E(l)) / t(B + r B l) for B live rows of which a share r drafted (a
draft must beat no draft by 3%, the steps' timing noise); at l = 0 a one-token probe every few steps, where a draft
accepted in full would pay, keeps the acceptance current. Draft lengths never change a greedy answer (verification
keeps the target's tokens), only how fast it comes; a step with sampled rows, whose answer does depend on the
length, drafts the initial length, which no timing moves.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Protocol

import torch


class DraftLengthPolicy(Protocol):
    @property
    def current(self) -> int: ...

    def next_length(self, greedy: bool) -> int:
        """The next step's draft length; greedy: every row of the step takes the argmax (else some row samples)."""
        ...

    def update(self, num_accepted: torch.Tensor, drafted: torch.Tensor) -> None:
        """num_accepted (A,) from the last verification; drafted (A,) the tokens each row drafted (0: none)."""
        ...

    def observe_step(self, rows: int, fed: int, drafting: int, seconds: float) -> None:
        """A step's live rows, positions fed (pending tokens and drafts), rows that drafted, and its time."""
        ...


@dataclass
class FixedDraftLength:
    length: int

    @property
    def current(self) -> int:
        return self.length

    def next_length(self, greedy: bool) -> int:
        return self.length

    def update(self, num_accepted: torch.Tensor, drafted: torch.Tensor) -> None:
        return None

    def observe_step(self, rows: int, fed: int, drafting: int, seconds: float) -> None:
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

    def next_length(self, greedy: bool) -> int:
        return self._length

    def update(self, num_accepted: torch.Tensor, drafted: torch.Tensor) -> None:
        active = drafted > 0
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

    def observe_step(self, rows: int, fed: int, drafting: int, seconds: float) -> None:
        return None


STEP_DECAY = 0.97  # weight of a step's time after each later step (about 30 steps remembered)
ACCEPT_DECAY = 0.99  # weight of a drafting row's outcome after each later drafting step
PROBE_EVERY = 8  # at length 0, every this many steps drafts one token so acceptance stays measured
MEAN_STEP = 0.2  # a step's share in its F's mean time
GROWTH = 2  # a measured length reaches at most this many tokens past the longest one tried
MIN_GAIN = 1.03  # the predicted rate a draft must reach over no draft: within the steps' timing noise, no draft


@dataclass
class StepCost:
    """A step's time by the positions F it feeds: each F's own recent mean where it was seen, linear between the Fs
    seen, and past the largest the line t = a + b F (exponentially weighted least squares over every step, b >= 0).
    The means matter where the kernels work in tiles of positions: a step one position past a tile reads the weights
    once more, a jump that no line through the other steps shows."""

    decay: float = STEP_DECAY
    _sums: list[float] = field(default_factory=lambda: [0.0] * 5)  # weight, F, F^2, t, F t
    _means: dict[int, float] = field(default_factory=dict)  # F -> recent mean seconds
    _fed: list[int] = field(default_factory=list)  # the Fs seen, ascending

    def add(self, fed: int, seconds: float) -> None:
        w, f, ff, t, ft = (self.decay * v for v in self._sums)
        self._sums = [w + 1.0, f + fed, ff + fed * fed, t + seconds, ft + fed * seconds]
        mean = self._means.get(fed)
        if mean is None:
            bisect.insort(self._fed, fed)
        self._means[fed] = seconds if mean is None else mean + MEAN_STEP * (seconds - mean)

    def seen(self, fed: int) -> bool:
        return fed in self._means

    def line(self) -> tuple[float, float]:
        """(a, b); b = 0 until the steps' F differ (then every fed position is priced as free)."""
        w, f, ff, t, ft = self._sums
        if w == 0.0:
            return 0.0, 0.0
        mean_f, mean_t = f / w, t / w
        spread = ff / w - mean_f * mean_f
        slope = max(0.0, (ft / w - mean_f * mean_t) / spread) if spread > 1e-9 * max(1.0, mean_f * mean_f) else 0.0
        return max(0.0, mean_t - slope * mean_f), slope

    def seconds(self, fed: float) -> float:
        """The expected time of a step feeding `fed` positions (fractional: an average over steps)."""
        if not self._fed:
            a, b = self.line()
            return a + b * fed
        after = bisect.bisect_left(self._fed, fed)  # the first F seen at or past `fed`
        if after == len(self._fed):
            lo = self._fed[-1]
            return self._means[lo] + self.line()[1] * (fed - lo)
        hi = self._fed[after]
        if hi == fed:
            return self._means[hi]
        if after == 0:
            return max(0.0, self._means[hi] - self.line()[1] * (hi - fed))
        lo = self._fed[after - 1]
        share = (fed - lo) / (hi - lo)
        return self._means[lo] + share * (self._means[hi] - self._means[lo])


@dataclass
class MeasuredDraftLength:
    """The draft length with the most tokens per second by the measured step cost and acceptance (module docstring).
    Greedy steps start without a draft (the step every length is weighed against) and reach at most GROWTH tokens
    past the longest length tried, so a length is priced before a longer one is; a position never drafted is taken
    to be accepted as often as the one before it, so the length grows while drafts are cheap and accepted.
    `initial`: a sampled step's length."""

    initial: int = 7
    maximum: int = 32
    cost: StepCost = field(default_factory=StepCost)
    _offered: list[float] = field(init=False)  # per position i (index i - 1): drafting rows whose draft reached i
    _taken: list[float] = field(init=False)  # ... of which the first i were accepted
    _rows: int = field(init=False, default=1)  # live rows of the last step
    _share: float = field(init=False, default=1.0)  # share of live rows that drafted (weighted over steps)
    _length: int = field(init=False, default=0)
    _tried: int = field(init=False, default=0)  # the longest length a greedy step was given
    _idle_steps: int = field(init=False, default=0)
    _asked: int = field(init=False, default=0)  # the length the last step was given

    def __post_init__(self) -> None:
        self._offered = [0.0] * self.maximum
        self._taken = [0.0] * self.maximum

    @property
    def current(self) -> int:
        """The length for a greedy step: the measured one, or at length 0 every PROBE_EVERY steps a one-token probe
        where a draft accepted in full would pay."""
        if self._length == 0 and self._idle_steps % PROBE_EVERY == PROBE_EVERY - 1 and self.rate(1, [1.0]) > self.rate(0, []):
            return 1
        return self._length

    def next_length(self, greedy: bool) -> int:
        """A greedy step's measured length; a step with sampled rows drafts `initial`, a length that no timing
        moves, so a sampled answer stays a function of its seed."""
        self._asked = self.current if greedy else self.initial
        if greedy:
            self._tried = max(self._tried, self._asked)
        return self._asked

    def update(self, num_accepted: torch.Tensor, drafted: torch.Tensor) -> None:
        """Each drafting row's positions up to this step's length count (a row drafting past it, a repetition loop's,
        counts no further: its acceptance is not the length's)."""
        if not bool((drafted > 0).any()):
            return
        asked = min(self._asked, self.maximum)
        self._offered = [ACCEPT_DECAY * v for v in self._offered]
        self._taken = [ACCEPT_DECAY * v for v in self._taken]
        for accepted, count in zip(num_accepted.tolist(), drafted.tolist()):
            for i in range(min(int(count), asked)):
                self._offered[i] += 1.0
                self._taken[i] += float(accepted > i)

    def observe_step(self, rows: int, fed: int, drafting: int, seconds: float) -> None:
        if rows <= 0:
            return
        self.cost.add(fed, seconds)
        self._rows = rows
        if drafting:
            self._share = 0.8 * self._share + 0.2 * drafting / rows
        self._idle_steps = self._idle_steps + 1 if self._length == 0 else 0
        self._length = self.best_length()

    def accepted_through(self) -> list[float]:
        """P(the first i drafted tokens accepted | a draft of at least i), i = 1..maximum, non-increasing; a
        position never drafted takes the previous one's value (one pseudo-count)."""
        chances, previous = [], 1.0
        for offered, taken in zip(self._offered, self._taken):
            previous = min(previous, (taken + previous) / (offered + 1.0))
            chances.append(previous)
        return chances

    def rate(self, length: int, chances: list[float]) -> float:
        """Expected tokens per second of steps drafting `length` with these P_1.. (B + r B E(l)) / t(B + r B l)."""
        rows, drafting = self._rows, self._rows * self._share
        gain = sum(chances[:length])
        return (rows + drafting * gain) / max(self.cost.seconds(rows + drafting * length), 1e-12)

    def best_length(self) -> int:
        """argmax of `rate` over l = 0 .. min(maximum, longest tried + GROWTH), the shortest where several tie and l = 0
        unless a draft gains MIN_GAIN; 0 while a step of the live rows alone has not been timed (the cost every other
        length is weighed against)."""
        if not self.cost.seen(self._rows):
            return 0
        chances = self.accepted_through()
        best, best_rate = 0, self.rate(0, chances) * MIN_GAIN  # a draft must beat no draft by MIN_GAIN
        for length in range(1, min(self.maximum, self._tried + GROWTH) + 1):
            rate = self.rate(length, chances)
            if rate > best_rate * (1.0 + 1e-9):
                best, best_rate = length, rate
        return best


def make_policy(kind: str, length: int, maximum: int) -> DraftLengthPolicy:
    """'fixed' (always `length`), 'bass' (dynamic, starting at `length`, at most `maximum`) or 'measured' (the
    length measured to pay most, starting at `length`, at most `maximum`)."""
    if kind == "fixed":
        return FixedDraftLength(length)
    if kind == "bass":
        return BassDraftLength(initial=length, maximum=maximum)
    if kind == "measured":
        return MeasuredDraftLength(initial=length, maximum=maximum)
    raise ValueError(f"draft length policy must be 'fixed', 'bass' or 'measured', got {kind!r}")
