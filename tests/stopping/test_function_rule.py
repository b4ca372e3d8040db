"""The function-complete rule on literal answers: where the excess starts, fed whole and streamed."""

from __future__ import annotations

import pytest

from quench.stopping import FunctionComplete, FunctionRule
from stopping.scanning import kept

CHAT = FunctionRule("chat", "f")
COMPLETION = FunctionRule("completion", "f")
PROMPT = 'def f(x):\n    """Return x."""\n'


CASES = [
    # (name, rule, prompt, answer, kept text or None)
    (
        "fence closes",
        CHAT, "",
        "```python\ndef f(x):\n    return x\n```\n\nThis function returns x.",
        "```python\ndef f(x):\n    return x\n",
    ),
    (
        "prose before the fence",
        CHAT, "",
        "Here is the code:\n\n```python\ndef f(x):\n    return x\n```\nDone.",
        "Here is the code:\n\n```python\ndef f(x):\n    return x\n",
    ),
    (
        "test code after the body, inside the fence",
        CHAT, "",
        "```python\ndef f(x):\n    return x\n\n\nprint(f(2))\n```\n",
        "```python\ndef f(x):\n    return x\n\n\n",
    ),
    (
        "dedent after body, completion",
        COMPLETION, PROMPT,
        "    return x\n\n\ndef check(candidate):\n    assert candidate(1) == 1\n",
        "    return x\n\n\n",
    ),
    (
        "docstring alone is a body: a top-level line at once ends it",
        COMPLETION, PROMPT,
        "if __name__ == '__main__':\n    pass\n",
        "",
    ),
    (
        "nested def does not end the target",
        CHAT, "",
        "```python\ndef f(x):\n    def g(y):\n        return y\n    return g(x)\nassert f(1) == 1\n```",
        "```python\ndef f(x):\n    def g(y):\n        return y\n    return g(x)\n",
    ),
    (
        "decorator before the target",
        CHAT, "",
        "```python\n@cache\ndef f(x):\n    return x\n```\n",
        "```python\n@cache\ndef f(x):\n    return x\n",
    ),
    (
        "helpers after the target are kept in chat answers",
        CHAT, "",
        "```python\ndef f(x):\n    return g(x)\n\n@cache\ndef g(x):\n    return x\n\nimport os\nprint(f(1))\n```",
        "```python\ndef f(x):\n    return g(x)\n\n@cache\ndef g(x):\n    return x\n\nimport os\n",
    ),
    (
        "a decorator after the body ends a completion",
        COMPLETION, PROMPT,
        "    return x\n@cache\ndef g():\n    pass\n",
        "    return x\n",
    ),
    (
        "a fence inside a triple-quoted string is not the closing fence",
        CHAT, "",
        '```python\ndef f(x):\n    s = """\n```\n"""\n    return s\n```\nprose',
        '```python\ndef f(x):\n    s = """\n```\n"""\n    return s\n',
    ),
    (
        "a fence inside a one-line string",
        CHAT, "",
        '```python\ndef f(x):\n    return "```" + x\n```\n',
        '```python\ndef f(x):\n    return "```" + x\n',
    ),
    (
        "brackets and backslashes continue a line",
        CHAT, "",
        "```python\ndef f(x):\n    y = [1,\n2]\n    z = 1 + \\\n3\n    return y\nf(1)\n```",
        "```python\ndef f(x):\n    y = [1,\n2]\n    z = 1 + \\\n3\n    return y\n",
    ),
    (
        "comments at column 0 do not end the body",
        COMPLETION, PROMPT,
        "    y = x\n# a note\n    return y\nprint(f(1))\n",
        "    y = x\n# a note\n    return y\n",
    ),
    (
        "multi-line def header",
        CHAT, "",
        "```python\ndef f(\n    x,\n    y,\n):\n    return x\nf(1, 2)\n```",
        "```python\ndef f(\n    x,\n    y,\n):\n    return x\n",
    ),
    (
        "one-line def",
        CHAT, "",
        "```python\ndef f(x): return x\nprint(f(1))\n```",
        "```python\ndef f(x): return x\n",
    ),
    (
        "a block without the target is passed over",
        CHAT, "",
        "```python\nx = 1\n```\nand\n```python\ndef f(x):\n    return x\n```\nbye",
        "```python\nx = 1\n```\nand\n```python\ndef f(x):\n    return x\n",
    ),
    (
        "a method: the class's next method ends it without keep_definitions",
        FunctionRule("chat", "f", keep_definitions=False), "",
        "```python\nclass A:\n    def f(self):\n        return 1\n    def g(self):\n        return 2\n```",
        "```python\nclass A:\n    def f(self):\n        return 1\n",
    ),
    (
        "code without a fence, then prose",
        CHAT, "",
        "def f(x):\n    return x\n\nThis returns x.",
        "def f(x):\n    return x\n\n",
    ),
    ("unfinished answer", CHAT, "", "```python\ndef f(x):\n    return x", None),
    ("no target in the answer", CHAT, "", "```python\ndef g(x):\n    return x\n```\nprose", None),
    (
        "tabs",
        COMPLETION, 'def f(x):\n\t"""doc"""\n',
        "\treturn x\nf(1)\n",
        "\treturn x\n",
    ),
]


@pytest.mark.parametrize("name,rule,prompt,answer,expected", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("chunk", [0, 1, 3, 7])
def test_rule_cases(name: str, rule: FunctionRule, prompt: str, answer: str, expected: str | None, chunk: int) -> None:
    assert kept(answer, rule, prompt, chunk) == expected


def test_any_function_when_no_entry_point() -> None:
    answer = "```python\ndef g(x):\n    return x\nprint(g(1))\n```"
    assert kept(answer, FunctionRule("chat")) == "```python\ndef g(x):\n    return x\n"


def test_switches() -> None:
    answer = "```python\ndef f(x):\n    return x\nprint(f(1))\n```\nprose"
    assert kept(answer, FunctionRule("chat", "f", at_dedent=False)) == "```python\ndef f(x):\n    return x\nprint(f(1))\n"
    assert kept(answer, FunctionRule("chat", "f", at_fence=False, at_dedent=False)) is None


def test_decides_on_an_unfinished_line() -> None:
    """`print` ends the function at its first letter; `de` waits (it may become `def`)."""
    scanner = FunctionComplete(CHAT)
    assert scanner.feed("```python\ndef f(x):\n    return x\n") is None
    assert scanner.feed("p") == len("```python\ndef f(x):\n    return x\n")
    scanner = FunctionComplete(CHAT)
    scanner.feed("```python\ndef f(x):\n    return x\n")
    assert scanner.feed("de") is None
    assert scanner.feed("f g():\n    pass\n") is None
    assert scanner.feed("``") is None
    assert scanner.feed("`") is not None


def test_stop_is_sticky() -> None:
    scanner = FunctionComplete(CHAT)
    at = scanner.feed("```python\ndef f(x):\n    return x\n```")
    assert at is not None and scanner.feed("more text\n") == at
