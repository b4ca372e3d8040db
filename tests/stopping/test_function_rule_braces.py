"""The function-complete rule in MBXP's brace languages, on literal answers, fed whole and streamed."""

from __future__ import annotations

import pytest

from quench.datasets import Problem
from quench.stopping.criteria import rules_for
from quench.stopping.function_rule import BracedFunctionComplete, FunctionRule
from stopping.scanning import kept

JS_PROMPT = "/**\n * Add. { not a brace }\n */\nfunction addNums(a, b) {\n"
JAVA_PROMPT = "class AddNums {\n    /** Add. */\n    public static int addNums(int a, int b) {\n"


CASES = [
    ("javascript completion", "javascript", "completion", JS_PROMPT,
     "  return a + b;\n}\n\nconsole.log(addNums(1, 2));\n", "  return a + b;\n}"),
    ("braces in strings, comments and nested blocks", "javascript", "completion", JS_PROMPT,
     "  const s = '}'; // }\n  if (a) { return `}`; }\n  /* } */ return s;\n}\nfunction other() {}\n",
     "  const s = '}'; // }\n  if (a) { return `}`; }\n  /* } */ return s;\n}"),
    ("java: the method and its class", "java", "completion", JAVA_PROMPT,
     "        return a + b;\n    }\n}\n\nclass Extra {}\n", "        return a + b;\n    }\n}"),
    ("go", "go", "completion", "package main\n// Add.\nfunc add_nums (a int, b int) int {\n",
     "\treturn a + b\n}\n\nfunc main() {\n}\n", "\treturn a + b\n}"),
    ("cpp: never closed", "cpp", "completion", "int addNums(int a, int b) {\n", "    return a + b;\n", None),
    ("chat: the fence of the block that defines the target", "javascript", "chat", JS_PROMPT,
     "Here:\n```javascript\nfunction helper() {}\n```\n```javascript\nfunction addNums(a, b) {\n  return a + b;\n}\n"
     "```\nIt adds.", "Here:\n```javascript\nfunction helper() {}\n```\n```javascript\n"
     "function addNums(a, b) {\n  return a + b;\n}\n"),
    ("chat: no block defines it", "cpp", "chat", "", "```cpp\nint x = 1;\n```\ntext", None),
]


@pytest.mark.parametrize(("name", "language", "fmt", "prompt", "answer", "expected"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("chunk", [0, 1, 3])
def test_where_the_excess_starts(name, language, fmt, prompt, answer, expected, chunk) -> None:
    rule = FunctionRule(fmt, "addNums" if language != "go" else "add_nums", language=language)
    assert kept(answer, rule, prompt, chunk) == expected


def test_rules_for_an_mbxp_problem_use_the_brace_scanner() -> None:
    problem = Problem("MBJSP/1", JS_PROMPT, "", "", "addNums", "mbjsp", language="javascript")
    rules = rules_for(problem, "completion")
    assert isinstance(rules.start().function, BracedFunctionComplete)
    assert rules.cut("  return a + b;\n}\nconsole.log(1);\n")[0] == "  return a + b;\n}"


def test_a_rule_turned_off_never_stops() -> None:
    rule = FunctionRule("completion", "addNums", at_dedent=False, language="javascript")
    assert kept("  return 1;\n}\nmore", rule, JS_PROMPT) is None
