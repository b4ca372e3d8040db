"""The labelling rule on hand-written MBXP answers: the excess starts after the brace that closes the function."""

from __future__ import annotations

import pytest

from quench.datasets import Problem
from quench.stopping.labels import RULE, excess_start

PROMPTS = {
    "javascript": "/**\n * Return x.\n */\nfunction f(x) {\n",
    "go": 'package main\n\nimport "fmt"\n// Return x.\nfunc f (x int) int {\n',
    "cpp": "#include <bits/stdc++.h>\nusing namespace std;\n\n/**\n * Return x.\n */\nint f(int x) {\n",
    "java": "import java.util.*;\n\nclass F {\n    /**\n     * Return x.\n     */\n    public static int f(int x) {\n",
}


def problem(language: str) -> Problem:
    return Problem(task_id="T/0", prompt=PROMPTS[language], canonical_solution="", test="", entry_point="f",
                   benchmark="t", language=language)


def excess(language: str, text: str, prompt_format: str = "chat", finished: bool = True) -> str | None:
    at = excess_start(problem(language), text, prompt_format, finished)
    return None if at is None else text[at:]


def test_rule_version() -> None:
    assert RULE == "sanitized-end-v2"


# Chat: (language, answer, excess). The function's closing brace line is the last required line.
CHAT = [
    ("javascript",
     "Here it is:\n```javascript\nfunction f(x) {\n  if (x) { return x; }\n  return x;\n}\n\nconsole.log(f(1));\n```\nDone.",
     "\nconsole.log(f(1));\n```\nDone."),
    ("javascript",  # a helper before the function is required; braces in strings and comments do not count
     "```js\nconst g = (x) => { return x; };\nfunction f(x) {\n  // }\n  const s = \"}{\";\n  return g(x);\n}\n```\n",
     "```\n"),
    ("go",
     "```go\npackage main\n\nfunc f(x int) int {\n\treturn x\n}\n\nfunc main() {\n\tfmt.Println(f(1))\n}\n```\nThe function returns x.",
     "\nfunc main() {\n\tfmt.Println(f(1))\n}\n```\nThe function returns x."),
    ("cpp",
     "```cpp\n#include <iostream>\nint f(int x) {\n    return x;\n}\nint main() {\n    std::cout << f(1);\n}\n```",
     "int main() {\n    std::cout << f(1);\n}\n```"),
    ("java",  # the method's brace ends it: the class around it and a main are excess
     "```java\npublic class Main {\n    public static int f(int x) {\n        return x;\n    }\n\n"
     "    public static void main(String[] args) {\n        System.out.println(f(1));\n    }\n}\n```\n",
     "\n    public static void main(String[] args) {\n        System.out.println(f(1));\n    }\n}\n```\n"),
    ("javascript",  # the block that defines the entry point is chosen, not the first
     "```javascript\nconsole.log(1);\n```\nand\n```javascript\nfunction f(x) {\n  return x;\n} // end\nf(2);\n```",
     "f(2);\n```"),
]


@pytest.mark.parametrize("language,text,expected", CHAT)
def test_chat_ends_after_the_entry_points_closing_brace(language: str, text: str, expected: str) -> None:
    assert excess(language, text) == expected


def test_chat_unknown_answers() -> None:
    assert excess("javascript", "I cannot help.") is None
    assert excess("javascript", "```javascript\nfunction g(x) {\n  return x;\n}\n```") is None  # no entry point
    cut = "```go\nfunc f(x int) int {\n\tfor {\n"
    assert excess("go", cut, finished=False) is None  # cut by the limit before the function closed
    assert excess("go", cut + "```\nMore.", finished=True) == "```\nMore."  # the whole block is kept


# Completion: the brace that closes the prompt's open blocks (the method and its class in Java).
COMPLETION = [
    ("javascript", "  return x;\n}\n\nconsole.log(f(1));\n", "\nconsole.log(f(1));\n"),
    ("go", "\tif x > 0 {\n\t\treturn x\n\t}\n\treturn 0\n}\n\nfunc main() {}\n", "\nfunc main() {}\n"),
    ("cpp", "    return x; }\nint main() { return f(1); }", "int main() { return f(1); }"),
]


@pytest.mark.parametrize("language,text,expected", COMPLETION)
def test_completion_ends_where_the_prompts_blocks_close(language: str, text: str, expected: str) -> None:
    assert excess(language, text, "completion") == expected


def test_completion_java_closes_the_class_too() -> None:
    # The Java prompt leaves the class and the method open: the method's brace alone is not the end.
    text = "        return x;\n    }\n}\nclass Other {}\n"
    assert excess("java", text, "completion") == "class Other {}\n"


def test_completion_unknown_while_open() -> None:
    assert excess("go", "\tfor {\n\t\tx++\n", "completion", finished=False) is None
    assert excess("go", "\treturn x\n", "completion", finished=False) is None
    assert excess("go", "\treturn x\n\n", "completion", finished=True) == "\n"
