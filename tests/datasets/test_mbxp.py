"""MBXP as package data: MBPP's splits by task number, languages, partial prompts, program sources."""

from __future__ import annotations

import json

import pytest

from quench.datasets import LANGUAGES, Problem, language_of, load_benchmark, load_mbxp, partial_problem
from quench.datasets.languages import java_source, launcher, source
from quench.datasets.loading import mbxp_path
from quench.datasets.partial import split_braced_body
from quench.datasets.problem import problem_from_json
from quench.errors import QuenchError

SIZES = {"mbjsp": (966, 498), "mbgp": (939, 483), "mbcpp": (848, 437), "mbjp": (966, 498)}


@pytest.mark.parametrize("benchmark", list(SIZES))
def test_every_language_loads_with_mbpps_split_by_task_number(benchmark: str) -> None:
    everything, test = load_mbxp(benchmark, None), load_benchmark(benchmark)
    assert (len(everything), len(test)) == SIZES[benchmark]
    numbers = [int(p.task_id.split("/")[1]) for p in test]
    assert min(numbers) >= 11 and max(numbers) <= 510
    assert {p.language for p in everything} == {language_of(benchmark)}
    assert {p.benchmark for p in test} == {benchmark}
    train = load_benchmark(benchmark, split="train")
    assert all(int(p.task_id.split("/")[1]) >= 601 for p in train)
    assert not {p.task_id for p in train} & {p.task_id for p in test}


def test_the_data_is_the_release_byte_for_byte_with_its_notice() -> None:
    path = mbxp_path("mbjsp")
    assert (path.parent / "MBXP_NOTICE").read_text().startswith("MBXP+")
    assert "mbjsp_release_v1.2.jsonl" in (path.parent / "ATTRIBUTION.md").read_text()
    first = json.loads(path.read_text().splitlines()[0])
    assert first["task_id"] == "MBJSP/1" and first["language"] == "javascript"


def test_tasks_select_by_number_and_unknown_splits_fail() -> None:
    assert [p.task_id for p in load_benchmark("mbgp", tasks=["11", "13"])] == ["MBGP/11", "MBGP/13"]
    with pytest.raises(QuenchError, match="unknown MBPP split 'dev'"):
        load_benchmark("mbcpp", split="dev")


def test_partial_prompts_take_half_the_reference_body_at_a_statement_end() -> None:
    body = "    let a = 1;\n    if (a) {\n        a += 1;\n    }\n    return a;\n}"
    assert split_braced_body(body) == ("    let a = 1;\n    if (a) {\n        a += 1;\n", "    }\n    return a;\n}")
    body = "    let a = [1,\n        2, 3,\n        4];\n    return a;\n}"  # half falls inside the array: back to a statement end
    assert split_braced_body(body) == ("", body)
    assert split_braced_body("    return [1,\n        2];\n}") == ("", "    return [1,\n        2];\n}")


def test_a_problem_without_a_reference_keeps_its_full_prompt_as_the_partial_one() -> None:
    [full] = load_benchmark("mbgp", tasks=["11"])
    [partial] = load_benchmark("mbgp", tasks=["11"], partial=True)
    assert partial.prompt == full.prompt and partial.prompt_kind == "partial"
    [java] = load_benchmark("mbjp", tasks=["11"], partial=True)
    [whole] = load_benchmark("mbjp", tasks=["11"])
    assert java.prompt + java.canonical_solution == whole.prompt + whole.canonical_solution
    assert java.prompt != whole.prompt


def test_language_round_trips_and_unknown_languages_are_refused() -> None:
    problem = Problem("X/1", "p", "s", "t", "f", language="go")
    assert problem_from_json(problem.to_json()).language == "go"
    assert problem_from_json({"task_id": "a", "prompt": "", "test": "", "entry_point": "f"}).language == "python"
    with pytest.raises(ValueError, match="unknown language 'cobol'"):
        problem_from_json({"task_id": "a", "prompt": "", "test": "", "entry_point": "f", "language": "COBOL"})


def test_sources_follow_mbxp_and_javas_harness_comes_first() -> None:
    assert source("cpp", "P\n", "C\n", "T\n") == "P\nC\nT\n"
    java = java_source("import java.util.*;\n\n\nclass A {\n", "  }\n}\n", "\nclass Main {}\n")
    assert java == "import java.util.*;\n\n\nclass Main {}\n\n\nclass A {\n  }\n}\n\n"
    program = launcher("javascript", "console.log(1)\n")
    compile(program, "<launcher>", "exec")  # a Python program
    assert "'console.log(1)\\n'" in program and set(LANGUAGES) == {"javascript", "go", "cpp", "java"}


def test_partial_problems_of_brace_languages_split_by_braces_not_pythons_tokens() -> None:
    problem = Problem("MBJSP/0", "function f(a) {\n", "    let b = 1;\n    if (a) {\n        b += 1;\n    }\n    return b;\n}",
                      "", "f", language="javascript")
    assert partial_problem(problem).prompt == "function f(a) {\n    let b = 1;\n    if (a) {\n        b += 1;\n"
