import ast
import warnings

from quench.datasets import Problem, load_humaneval, load_mbpp, partial_problem, split_body


def test_split_keeps_floor_half_of_the_code_lines():
    body = "    a = 1\n    b = 2\n\n    c = 3\n    return a + b + c\n"
    head, rest = split_body(body)
    assert head == "    a = 1\n    b = 2\n"
    assert rest == "\n    c = 3\n    return a + b + c\n"


def test_split_never_cuts_inside_brackets():
    body = "    x = [\n        1,\n        2,\n    ]\n    return x\n"
    head, rest = split_body(body)
    assert head == "" and rest == body  # the only complete statement boundary before half is the start


def test_one_line_body_has_no_split():
    problem = Problem("t/0", "def f():\n", "    return 1\n", "def check(c): assert c() == 1", "f")
    partial = partial_problem(problem)
    assert partial.prompt == problem.prompt and partial.canonical_solution == problem.canonical_solution
    assert partial.prompt_kind == "partial"


def parses(code: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # old escape sequences in the benchmarks' own code
            ast.parse(code)
    except SyntaxError:
        return False
    return True


def test_partial_prompt_plus_rest_is_the_reference_program_everywhere():
    broken = []
    for problem in load_humaneval() + load_mbpp("all"):
        partial = partial_problem(problem)
        assert partial.prompt + partial.canonical_solution == problem.prompt + problem.canonical_solution
        if not parses(f"{problem.prompt}{problem.canonical_solution}\n\n{problem.test}\n"):
            broken.append(problem.task_id)
    assert broken == ["MBPP/64", "MBPP/966"]  # their released references are mis-indented


def test_recode_split_counts_every_line_and_may_cut_inside_a_statement():
    from quench.datasets.partial import recode_partial_problem

    body = "    x = [\n        1,\n        2,\n    ]\n    return x\n"
    problem = Problem("t/1", "def f():\n", body, "def check(c): assert c() == [1, 2]", "f")
    assert recode_partial_problem(problem).prompt == "def f():\n    x = [\n        1,\n"  # 5 lines: cut after 2
    for problem in load_humaneval() + load_mbpp("all"):
        split = recode_partial_problem(problem)
        assert split.prompt + split.canonical_solution == problem.prompt + problem.canonical_solution
