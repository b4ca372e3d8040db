"""The loop rule: stop an answer caught in a repetition loop.

A small model decoding greedily often falls into a loop it never leaves (the same doctest line, the
same `elif` branch, one bracket after another) and runs to the token limit. The rule stops an answer
at the first character where either part holds; the output keeps the text up to that character.

- Exact: its last `span` characters equal the `span` characters one period earlier, for a period of
  at most `max_period` characters: from there on the text only repeats itself. With `exempt_spans`,
  not where the prompt holds those `span` characters: an answer that restates its prompt repeats what
  it was given, and goes on.
- Numbers (`numbers_span` > 0): the same on the text's shape, where each number counts as one sign
  (`shape`: a run of digits not preceded by a letter, digit or underscore, so `p1x` and `x_2` keep
  theirs), over at least `numbers_span` characters and `numbers_repeats` periods, a period that holds a
  letter. Loops that count (`Example 9:`, `Example 10:`, ...; `elif n == 7: return 49`, ...) repeat
  in shape only. It is checked where the text does not end in a digit (a number may go on).
  The repeats and the letter keep data apart: a doctest's three examples, a table of numbers.

The rule reads text and is checked at every character, so where it stops depends on the text alone:
not on how many tokens a step added (speculation) nor on the batch. Candidate periods come from the
earlier occurrences of the last `probe` characters (a text periodic over `span >= probe` characters
has one at each of its periods), so a check costs a reverse search over `max_period + probe`
characters and a comparison per occurrence.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

NUMBER = "0"  # a number's one sign in the shape (a digit after a letter, digit or underscore keeps its own)
DIGITS = frozenset("0123456789")


@dataclass(frozen=True)
class LoopRule:
    """When an answer counts as looping (characters)."""

    span: int = 300  # this many characters equal those one period earlier
    max_period: int = 1024  # the longest period looked for
    probe: int = 16  # the suffix whose earlier occurrences give the candidate periods
    numbers_span: int = 200  # the numbers part: this many characters of the shape repeat (0: off)
    numbers_repeats: int = 4  # ... over at least this many periods
    exempt_spans: bool = True  # the exact part does not count a span the prompt holds

    def __post_init__(self) -> None:
        if not 1 <= self.probe <= self.span:
            raise ValueError(f"LoopRule: probe must be in [1, span], got probe={self.probe}, span={self.span}")
        if self.max_period < 1:
            raise ValueError(f"LoopRule: max_period must be positive, got {self.max_period}")
        if self.numbers_span and not self.probe <= self.numbers_span:
            raise ValueError(f"LoopRule: numbers_span must be 0 or at least probe, got {self.numbers_span}")
        if self.numbers_repeats < 2:
            raise ValueError(f"LoopRule: numbers_repeats must be at least 2, got {self.numbers_repeats}")

    def settings(self) -> dict[str, int | bool]:
        return asdict(self)

    def numbers_window(self) -> int:
        """The most shape characters one check of the numbers part reads."""
        return self.probe + max(self.numbers_span, (self.numbers_repeats - 1) * self.max_period) + self.max_period


LOOP_RULE = LoopRule()
# The rule as older run directories ran it (they record no `exempt_spans`): periods of at most 256 characters, every
# span counting; the oldest had no numbers part.
UNEXEMPT_LOOP_RULE = LoopRule(max_period=256, exempt_spans=False)
EXACT_LOOP_RULE = LoopRule(max_period=256, numbers_span=0, exempt_spans=False)


def recorded_loop_rule(settings: dict) -> LoopRule:
    """The rule a run directory recorded; one recorded before `exempt_spans` ran without it."""
    return LoopRule(**{"exempt_spans": False, **settings})


def periodic_at(text: str, end: int, probe: int, max_period: int, least_span: int, periods: int = 1,
                letter: bool = False) -> bool:
    """Whether, for some period p <= max_period, text[end - span : end] equals the span one period earlier, with
    span = max(least_span, (periods - 1) p) (and, with `letter`, the last period holding a letter)."""
    if end < least_span + 1:
        return False
    suffix = text[end - probe : end]
    low = max(0, end - probe - max_period)
    found = text.rfind(suffix, low, end - 1)  # the nearest earlier occurrence: the shortest period first
    while found >= 0:
        period = end - probe - found
        span = max(least_span, (periods - 1) * period)
        if (end - span - period >= 0 and text[end - span : end] == text[end - span - period : end - period]
                and (not letter or any(c.isalpha() for c in text[end - period : end]))):
            return True
        found = text.rfind(suffix, low, found + probe - 1)
    return False


def repeats_at(text: str, end: int, rule: LoopRule) -> bool:
    """The exact part: text[end - span : end] equals the span one period earlier, for some period <= max_period."""
    return periodic_at(text, end, rule.probe, rule.max_period, rule.span)


def shape_repeats_at(shape: str, end: int, rule: LoopRule) -> bool:
    """The numbers part on a shape: for some period p <= max_period holding a letter, its last
    max(numbers_span, (numbers_repeats - 1) p) characters equal those one period earlier."""
    return rule.numbers_span > 0 and periodic_at(shape, end, rule.probe, rule.max_period, rule.numbers_span,
                                                  rule.numbers_repeats, letter=True)


class Shaper:
    """A text's shape, built one character at a time."""

    def __init__(self) -> None:
        self.shape = ""
        self.previous = ""  # the last character added
        self.in_number = False  # it is a digit of a number

    def add(self, c: str) -> bool:
        """Add one character; whether the shape is settled where it ends (the text does not end in a digit)."""
        if c not in DIGITS:
            self.shape += c
            self.in_number = False
        elif not self.in_number and not (self.previous.isalnum() or self.previous == "_"):
            self.shape += NUMBER
            self.in_number = True
        elif not self.in_number:
            self.shape += c  # a digit of a name
        self.previous = c
        return c not in DIGITS

    def keep_last(self, count: int) -> None:
        self.shape = self.shape[-count:]


def shape(text: str) -> str:
    """The text with each number (a digit run not preceded by a letter, digit or underscore) as one sign."""
    shaper = Shaper()
    for c in text:
        shaper.add(c)
    return shaper.shape


class LoopScanner:
    """One row's loop rule over streamed text: `feed(new)` -> the offset where the answer stops, or None.
    `prompt`: the text the row was asked about (the benchmark prompt), read where `rule.exempt_spans`."""

    def __init__(self, rule: LoopRule = LOOP_RULE, prompt: str = "") -> None:
        self.rule = rule
        self.prompt = prompt
        self.window = ""  # the last span + max_period characters fed: all an exact check reads
        self.fed = 0  # characters fed so far
        self.shaper = Shaper()  # the shape's last characters: all a numbers check reads

    def feed(self, new_text: str) -> int | None:
        window = self.window + new_text
        base, first = self.fed - len(self.window), len(self.window) + 1  # window[0]'s offset; the first new end
        self.fed += len(new_text)
        self.window = window[max(0, len(window) - self.rule.span - self.rule.max_period) :]
        return next((base + end for end in range(first, len(window) + 1)
                     if self._numbers_hold(window[end - 1]) or self._repeats(window, end)), None)

    def _repeats(self, window: str, end: int) -> bool:
        """The exact part where `window[:end]` ends; with `exempt_spans`, a span the prompt holds does not count."""
        return repeats_at(window, end, self.rule) and not (
            self.rule.exempt_spans and window[end - self.rule.span : end] in self.prompt)

    def _numbers_hold(self, c: str) -> bool:
        """Add one character to the shape; whether the numbers part holds where it ends."""
        if not self.rule.numbers_span or not self.shaper.add(c):
            return False
        keep = self.rule.numbers_window()
        if len(self.shaper.shape) > 2 * keep:
            self.shaper.keep_last(keep)
        return shape_repeats_at(self.shaper.shape, len(self.shaper.shape), self.rule)
