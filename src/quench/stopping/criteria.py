"""Text stopping rules per row — stop sequences, the function-complete rule and the loop rule — and their engine hook.

EOS and the token limit are the engine's own checks; the rules here read the generated text. Each
row's `TextStops` is incremental: given the text so far it looks at what was added since its last
call (plus the unfinished line), so a long answer costs O(new text) per step, not O(text).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Mapping

from quench.datasets import Problem
from quench.engine.types import GenerationRequest
from quench.stopping.function_rule import FunctionComplete, FunctionRule, function_scanner
from quench.stopping.loop_rule import LoopRule, LoopScanner

# Stop sequences of the common harnesses for raw completions (docs/stopping.md, "Stop sequences").
COMPLETION_STOPS: dict[str, tuple[str, ...]] = {
    "humaneval": ("\ndef ", "\nclass ", "\nif ", "\nprint(", "\n#"),
    "mbpp": ("\ndef ", "\nclass ", "\nif ", "\nprint(", "\n#", "\nassert ", '\n"""'),
    # MBXP's languages: MBXP's and CodeFast's stop sequences (docs/languages.md).
    "mbjsp": ("\nconsole", "\n/**", "\nmodule"),
    "mbgp": ("\nfunc",),
    "mbcpp": ("\nint main", "\n/**"),
    "mbjp": ("\n    public static void",),
}
# A chat answer's code block closes with a bare fence on its own line; "```python" opens one.
CHAT_STOPS: tuple[str, ...] = ("\n```\n",)


def default_stop_sequences(benchmark: str, prompt_format: str) -> tuple[str, ...]:
    """The stop sequences quench uses unless told otherwise, per benchmark and prompt format."""
    if prompt_format == "chat":
        return CHAT_STOPS
    return COMPLETION_STOPS.get(benchmark, COMPLETION_STOPS["humaneval"])


@dataclass(frozen=True)
class TextStop:
    offset: int  # where the excess text starts: the output is text[:offset]
    reason: str  # "stop" (a stop sequence), "function" (the function-complete rule) or "loop" (the loop rule)


class SequenceMatcher:
    """Finds the earliest stop sequence in streamed text, searching only the new text and a short tail."""

    def __init__(self, stop_sequences: tuple[str, ...]) -> None:
        self.stops = tuple(s for s in stop_sequences if s)
        self.overlap = max((len(s) for s in self.stops), default=1) - 1
        self.tail = ""  # the last `overlap` characters fed
        self.fed = 0  # characters fed so far

    def feed(self, new_text: str) -> int | None:
        window = self.tail + new_text
        base = self.fed - len(self.tail)
        hits = [i for s in self.stops if (i := window.find(s)) >= 0]
        self.fed += len(new_text)
        self.tail = window[max(0, len(window) - self.overlap) :]
        return base + min(hits) if hits else None


class TextStops:
    """One row's text rules. `update(text)` takes the whole text so far and returns the first stop."""

    def __init__(
        self, stop_sequences: tuple[str, ...] = (), function: FunctionComplete | None = None, loop: LoopScanner | None = None
    ) -> None:
        self.sequences = SequenceMatcher(stop_sequences) if stop_sequences else None
        self.function = function
        self.loop = loop
        self.text = ""
        self.stop: TextStop | None = None

    def update(self, text: str) -> TextStop | None:
        if self.stop is not None:
            return self.stop
        if not text.startswith(self.text):
            raise ValueError("TextStops.update: the text must extend the previous text")
        new = text[len(self.text) :]
        self.text = text
        found: list[TextStop] = []
        if self.sequences is not None and (at := self.sequences.feed(new)) is not None:
            found.append(TextStop(at, "stop"))
        if self.function is not None and (at := self.function.feed(new)) is not None:
            found.append(TextStop(at, "function"))
        if self.loop is not None and (at := self.loop.feed(new)) is not None:
            found.append(TextStop(at, "loop"))
        if found:
            self.stop = min(found, key=lambda s: s.offset)
        return self.stop


@dataclass(frozen=True)
class RowRules:
    """The text rules of one prompt: its stop sequences and, optionally, the function-complete and loop rules."""

    stop_sequences: tuple[str, ...] = ()
    function: FunctionRule | None = None
    prompt: str = ""  # the benchmark prompt (a completion continues it; the function rule reads its `def`, the loop rule its text)
    loop: LoopRule | None = None

    def start(self) -> TextStops:
        function = function_scanner(self.function, self.prompt) if self.function is not None else None
        return TextStops(self.stop_sequences, function, LoopScanner(self.loop, self.prompt) if self.loop is not None else None)

    def cut(self, text: str) -> tuple[str, TextStop | None]:
        """The text up to the first stop, and that stop (one pass over the whole text)."""
        stop = self.start().update(text)
        return (text[: stop.offset], stop) if stop is not None else (text, None)


def rules_for(
    problem: Problem, prompt_format: str, stop_sequences: tuple[str, ...] = (), function_complete: bool = True,
    keep_definitions: bool | None = None, loop: LoopRule | None = None,
) -> RowRules:
    """The rules for one benchmark problem (its entry point is the target function); `loop`: also the loop rule."""
    function = None
    if function_complete:
        function = FunctionRule(prompt_format, problem.entry_point, keep_definitions=keep_definitions,
                                language=problem.language)
    return RowRules(stop_sequences, function, problem.prompt, loop)


@dataclass
class RuleHook:
    """The engine's `StopHook` over `RowRules` per request key (a request without rules never stops here).

    The hook is not told which sample of a request it sees, so it keeps the scanners of a key in a
    list and continues the one whose text the new text extends (a fresh one when none does).
    Call `cut(request, text)` for the output text: the stop line itself is excess.
    """

    rules: Mapping[str, RowRules]
    max_rows: int = 4096  # scanners kept; the oldest are dropped (a dropped row is rescanned once)
    _rows: OrderedDict[str, list[TextStops]] = field(default_factory=OrderedDict, init=False, repr=False)
    _count: int = field(default=0, init=False, repr=False)

    def __call__(self, request: GenerationRequest, token_ids: list[int], text: str) -> bool:
        rules = self.rules.get(request.key)
        if rules is None:
            return False
        rows = self._rows.setdefault(request.key, [])
        self._rows.move_to_end(request.key)
        candidates = [r for r in rows if text.startswith(r.text)]
        row = max(candidates, key=lambda r: len(r.text)) if candidates else None
        if row is None:
            row = rules.start()
            rows.append(row)
            self._count += 1
            self._evict()
        if row.update(text) is None:
            return False
        rows.remove(row)
        self._count -= 1
        return True

    def cut(self, request: GenerationRequest, text: str) -> str:
        rules = self.rules.get(request.key)
        return rules.cut(text)[0] if rules is not None else text

    def _evict(self) -> None:
        while self._count > self.max_rows and self._rows:
            key, rows = next(iter(self._rows.items()))
            self._count -= len(rows)
            del self._rows[key]
