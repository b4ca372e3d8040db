"""The loop rule: stop an answer caught in a repetition loop.

A small model decoding greedily often falls into a loop it never leaves (the same doctest line, the
same `elif` branch, one bracket after another) and runs to the token limit. The rule stops an answer
at the first character where its last `span` characters equal the `span` characters one period
earlier, for a period of at most `max_period` characters: from there on the text only repeats itself.
The output keeps the text up to that character.

The rule reads text and is checked at every character, so where it stops depends on the text alone:
not on how many tokens a step added (speculation) nor on the batch. Candidate periods come from the
earlier occurrences of the last `probe` characters (a text periodic over `span >= probe` characters
has one at each of its periods), so a check costs a reverse search over `max_period + probe`
characters and a comparison per occurrence.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LoopRule:
    """When an answer counts as looping (characters)."""

    span: int = 300  # this many characters equal those one period earlier
    max_period: int = 256  # the longest period looked for
    probe: int = 16  # the suffix whose earlier occurrences give the candidate periods

    def __post_init__(self) -> None:
        if not 1 <= self.probe <= self.span:
            raise ValueError(f"LoopRule: probe must be in [1, span], got probe={self.probe}, span={self.span}")
        if self.max_period < 1:
            raise ValueError(f"LoopRule: max_period must be positive, got {self.max_period}")


def repeats_at(text: str, end: int, rule: LoopRule) -> bool:
    """Whether text[end - span : end] equals the span one period earlier, for some period <= max_period."""
    span, probe = rule.span, rule.probe
    if end < span + 1:
        return False
    suffix = text[end - probe : end]
    low = max(0, end - probe - rule.max_period)
    found = text.rfind(suffix, low, end - 1)  # the nearest earlier occurrence: the shortest period first
    while found >= 0:
        period = end - probe - found
        if end - span - period >= 0 and text[end - span : end] == text[end - span - period : end - period]:
            return True
        found = text.rfind(suffix, low, found + probe - 1)
    return False


class LoopScanner:
    """One row's loop rule over streamed text: `feed(new)` -> the offset where the answer stops, or None."""

    def __init__(self, rule: LoopRule = LoopRule()) -> None:
        self.rule = rule
        self.window = ""  # the last span + max_period characters fed: all a check reads
        self.fed = 0  # characters fed so far

    def feed(self, new_text: str) -> int | None:
        window = self.window + new_text
        base, first = self.fed - len(self.window), len(self.window) + 1  # window[0]'s offset; the first new end
        self.fed += len(new_text)
        self.window = window[max(0, len(window) - self.rule.span - self.rule.max_period) :]
        return next((base + end for end in range(first, len(window) + 1) if repeats_at(window, end, self.rule)), None)
