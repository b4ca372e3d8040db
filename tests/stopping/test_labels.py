"""The labelling rule on literal answers: the excess starts where the sanitizer's kept code ends."""

from __future__ import annotations

from quench.datasets import Problem
from quench.stopping.labels import CONTINUE, STOP, excess_start, token_labels, token_starts
from helpers import char_tokenizer

PROBLEM = Problem(
    task_id="T/0", prompt='def f(x):\n    """Return x."""\n', canonical_solution="    return x\n",
    test="def check(candidate):\n    assert candidate(1) == 1\n", entry_point="f", benchmark="t",
)


def excess(text: str, prompt_format: str = "chat", finished: bool = True) -> str | None:
    at = excess_start(PROBLEM, text, prompt_format, finished)
    return None if at is None else text[at:]


def test_chat_answer_with_tests_and_prose() -> None:
    text = "Sure!\n```python\ndef f(x):\n    return x\n\nprint(f(1))\n```\nThis prints 1."
    assert excess(text) == "\nprint(f(1))\n```\nThis prints 1."


def test_chat_helpers_after_the_target_are_required() -> None:
    text = "```python\ndef f(x):\n    return g(x)\n\ndef g(x):\n    return x\n```\n"
    assert excess(text) == "```\n"


def test_chat_block_defining_the_entry_point_is_chosen() -> None:
    text = "```python\nprint('hi')\n```\n```python\nimport os\ndef f(x):\n    return x\nf(2)\n```"
    assert excess(text) == "f(2)\n```"


def test_chat_unclosed_block_cut_by_the_limit_is_unknown() -> None:
    text = "```python\ndef f(x):\n    y = [1,\n"
    assert excess(text, finished=False) is None
    assert excess("```python\ndef f(x):\n    return x\n", finished=True) == ""


def test_chat_without_code_is_unknown() -> None:
    assert excess("I cannot help with that.") is None
    assert excess("```python\ndef g(x):\n    return x\n```") is None


def test_completion() -> None:
    assert excess("    return x\n\n\ndef check():\n    pass\n", "completion") == "\n\ndef check():\n    pass\n"
    assert excess("    return x\n    if x:\n", "completion", finished=False) is None
    assert excess("    return x\n", "completion", finished=True) == ""


def test_token_labels_by_start() -> None:
    tokenizer = char_tokenizer()
    ids = tokenizer("ab\ncd", add_special_tokens=False)["input_ids"]
    starts = token_starts(tokenizer, ids)
    assert starts == [0, 1, 2, 3, 4]
    assert token_labels(starts, 3) == [CONTINUE, CONTINUE, CONTINUE, STOP, STOP]
    assert token_labels(starts, 99) == [CONTINUE] * 5
