import ast
import json
from pathlib import Path

import pytest

from quench.datasets import Problem, load_humaneval, partial_problem
from quench.execution.program_build import program_for
from quench.execution.sanitize import sanitize

FIXTURES = Path(__file__).parent / "fixtures" / "smollm2_humaneval_chat.jsonl"
HUMANEVAL = {p.task_id: p for p in load_humaneval()}
PROBLEM = Problem("t/0", "import math\n\n\ndef area(r):\n    \"\"\"Area of a circle.\"\"\"\n", "    return math.pi * r * r\n",
                  "def check(c):\n    assert c(1) == math.pi\n", "area")


def test_chat_answer_with_prose_and_trailing_tests_keeps_only_the_function():
    answer = ("Here is the function:\n\n```python\ndef area(r):\n    return math.pi * r * r\n\nprint(area(2))\n"
              "assert area(1) > 3\nif __name__ == '__main__':\n    area(3)\n```\n\nThis uses the formula.")
    clean = sanitize(PROBLEM, answer, "chat")
    assert clean.completion == "def area(r):\n    return math.pi * r * r\n"
    assert clean.solution == "import math\n\n\ndef area(r):\n    return math.pi * r * r\n"  # the prompt's import kept


def test_chat_answer_picks_the_block_that_defines_the_entry_point():
    answer = "```python\nimport math\n```\nthen\n```python\ndef helper():\n    return 1\n\ndef area(r):\n    return r\n```"
    assert "def area(r)" in sanitize(PROBLEM, answer, "chat").solution


def test_chat_answer_cut_by_the_token_budget_keeps_the_complete_part():
    answer = "```python\ndef area(r):\n    x = r * r\n    return math.pi * x\n\ndef other(y):\n    return [y,\n"
    assert sanitize(PROBLEM, answer, "chat").completion == "def area(r):\n    x = r * r\n    return math.pi * x\n"


def test_chat_answer_with_only_a_body_continues_the_prompt():
    clean = sanitize(PROBLEM, "```python\n    return math.pi * r ** 2\n```", "chat")
    assert clean.solution == "" and clean.completion == "    return math.pi * r ** 2\n"


def test_raw_completion_stops_at_the_next_top_level_statement():
    text = "    return math.pi * r * r\n\n\nprint(area(3))\ndef more():\n    pass\n"
    assert sanitize(PROBLEM, text, "completion").completion == "    return math.pi * r * r\n"


def test_raw_completion_with_an_unfinished_last_line_is_trimmed_to_parse():
    text = "    x = r * r\n    return math.pi * (x +"
    assert sanitize(PROBLEM, text, "completion").completion == "    x = r * r\n"


def test_partial_prompt_solution_replaces_the_whole_function():
    problem = partial_problem(HUMANEVAL["HumanEval/0"])
    answer = "```python\n" + HUMANEVAL["HumanEval/0"].prompt + HUMANEVAL["HumanEval/0"].canonical_solution + "```"
    clean = sanitize(problem, answer, "chat")
    ast.parse(program_for(problem, clean.completion, clean.solution))
    assert clean.solution.startswith("from typing import List\n")


@pytest.mark.parametrize("row", [json.loads(line) for line in FIXTURES.read_text().splitlines()], ids=lambda r: r["task_id"])
def test_real_default_model_answers_become_parsable_programs(row):
    problem = HUMANEVAL[row["task_id"]]
    clean = sanitize(problem, row["raw"], "chat")
    program = program_for(problem, clean.completion, clean.solution)
    ast.parse(program)  # never a syntax error of our making
    if "```" in row["raw"] and clean.solution:
        prose = row["raw"].split("```")[-1].strip()
        assert "```" not in clean.solution and (not prose or prose[:40] not in clean.solution)  # prose, fences gone
        assert f"def {problem.entry_point}(" in clean.solution


def test_fixtures_cover_fenced_prose_and_cut_answers():
    rows = [json.loads(line) for line in FIXTURES.read_text().splitlines()]
    assert len(rows) >= 16
    assert any(row["raw"].count("```") >= 2 and len(row["raw"].split("```")[-1].strip()) > 20 for row in rows)  # prose after
    solved = [sanitize(HUMANEVAL[r["task_id"]], r["raw"], "chat").solution for r in rows]
    assert sum(bool(s) for s in solved) >= len(rows) // 2
