"""Stop sequences streamed, the rules combined per row, and the engine hook over interleaved rows."""

from __future__ import annotations

from quench.datasets import Problem
from quench.engine.types import GenerationRequest
from quench.stopping import (
    CHAT_STOPS,
    FunctionRule,
    RowRules,
    RuleHook,
    SequenceMatcher,
    TextStops,
    default_stop_sequences,
    rules_for,
)
from quench.stopping.function_rule import FunctionComplete


def stream(matcher: SequenceMatcher, text: str, chunk: int) -> int | None:
    for i in range(0, len(text), chunk):
        if (at := matcher.feed(text[i : i + chunk])) is not None:
            return at
    return None


def test_sequence_found_across_chunks() -> None:
    text = "    return x\n\ndef check():\n"
    for chunk in (1, 2, 5, 100):
        assert stream(SequenceMatcher(("\ndef ", "\nprint(")), text, chunk) == text.index("\ndef ")


def test_earliest_sequence_wins() -> None:
    assert SequenceMatcher(("\nprint(", "\n#")).feed("a\n# x\nprint(1)") == 1
    assert SequenceMatcher(("zzz",)).feed("abc") is None
    assert SequenceMatcher(()).feed("abc") is None


def test_defaults_per_format() -> None:
    assert default_stop_sequences("humaneval", "chat") == CHAT_STOPS
    assert "\nassert " in default_stop_sequences("mbpp", "completion")
    assert "\nassert " not in default_stop_sequences("humaneval", "completion")
    assert default_stop_sequences("my.jsonl", "completion") == default_stop_sequences("humaneval", "completion")


def test_chat_stop_sequence_skips_the_opening_fence() -> None:
    answer = "Sure:\n```python\ndef f():\n    return 1\n```\nprose"
    assert SequenceMatcher(CHAT_STOPS).feed(answer) == answer.index("\n```\n")


def test_text_stops_earliest_rule() -> None:
    answer = "```python\ndef f(x):\n    return x\n\nprint(f(1))\n```\n"
    stops = TextStops(CHAT_STOPS, FunctionComplete(FunctionRule("chat", "f")))
    stop = None
    for end in range(1, len(answer) + 1):
        stop = stops.update(answer[:end])
        if stop is not None:
            break
    assert stop is not None and stop.reason == "function"
    assert answer[: stop.offset].endswith("return x\n\n")


def test_row_rules_cut() -> None:
    rules = RowRules(("\nprint(",), None)
    assert rules.cut("a\nprint(1)") == ("a", rules.cut("a\nprint(1)")[1])
    assert rules.cut("abc") == ("abc", None)


def problem(entry: str) -> Problem:
    return Problem(
        task_id=f"T/{entry}", prompt=f"def {entry}(x):\n", canonical_solution="", test="", entry_point=entry,
        benchmark="t",
    )


def test_hook_interleaved_rows_of_one_request() -> None:
    """Two samples of one request, fed in turns with different texts, each stop at their own line."""
    hook = RuleHook({"T/f": rules_for(problem("f"), "chat")})
    request = GenerationRequest("T/f", (1, 2))
    a = "```python\ndef f(x):\n    return 1\nprint(1)\n"
    b = "```python\ndef f(x):\n    y = x\n    return y\n```\n"
    stopped = {}
    for end in range(1, max(len(a), len(b)) + 1):
        for name, text in (("a", a), ("b", b)):
            if name not in stopped and end <= len(text) and hook(request, [], text[:end]):
                stopped[name] = end
    assert a[: stopped["a"]].endswith("\np")
    assert b[: stopped["b"]].endswith("\n```")
    assert hook.cut(request, a) == "```python\ndef f(x):\n    return 1\n"


def test_hook_ignores_unknown_requests() -> None:
    hook = RuleHook({})
    assert hook(GenerationRequest("other", (1,)), [], "print(1)\n") is False


def test_hook_evicts_old_rows() -> None:
    rules = {f"T/{i}": RowRules(("STOP",)) for i in range(10)}
    hook = RuleHook(rules, max_rows=3)
    for i in range(10):
        hook(GenerationRequest(f"T/{i}", (1,)), [], "abc")
    assert sum(len(rows) for rows in hook._rows.values()) <= 3
    assert hook(GenerationRequest("T/0", (1,)), [], "abcSTOP") is True  # rescanned from scratch
