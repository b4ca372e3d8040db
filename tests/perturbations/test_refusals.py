"""A transformation that cannot write its variant refuses it, counted; it never passes the nominal
prompt (or black's raw tokens) off as perturbed. `;` statements and odd marker indents now apply."""

from __future__ import annotations

import functools

import pytest

from quench.datasets import Problem, load_mbpp
from quench.datasets.partial import recode_partial_problem
from quench.perturbations.base import apply_seeded, refusal
from quench.perturbations.catalog import create
from quench.perturbations.pipeline import perturb_problems
from quench.perturbations.recode.code_syntax import marker_statement
from quench.perturbations.recode.render import MARKER, split_statements

RECODE_SYNTAX = ("DeadCodeInserter", "DeadCodeInserterLast", "ForWhileTransformer", "OperandSwap",
                 "VarRenamerNaive", "VarRenamerRN")


@functools.cache
def mbpp() -> dict[str, Problem]:
    return {p.task_id: p for p in load_mbpp(None)}


def test_semicolon_statements_go_on_lines_of_their_own() -> None:
    before = 'def f(n):\n    a = 0; b = n \n    while b:a=1;b-=1\n    s = "x;y";\n    return a; # why\n'
    after = 'def f(n):\n    a = 0\n    b = n\n    while b:\n        a=1\n        b-=1\n    s = "x;y"\n    return a  # why\n'
    assert split_statements(before) == after
    assert split_statements("def f():\n\treturn 1\n") == "def f():\n\treturn 1\n"  # no change
    assert split_statements("def f(:\n") is None


def test_the_marker_statement_takes_the_indent_of_the_code_beside_it() -> None:
    # a blank line of 5 spaces before the cut gave ReCode's marker 5 spaces under 4-space code
    before = f'def f(x):\n    """Doc."""\n     \n     {MARKER}\n    return x\n'
    assert marker_statement(before) == f'def f(x):\n    """Doc."""\n     \n    {MARKER[2:]}\n    return x\n'
    nested = f"def f(x):\n    if x:\n        y = 1\n        {MARKER}\n    return x\n"
    assert marker_statement(nested) == nested.replace(MARKER, MARKER[2:])  # a valid indent stays


@pytest.mark.parametrize("task", ["MBPP/155", "MBPP/311", "MBPP/383", "MBPP/48"])
@pytest.mark.parametrize("name", RECODE_SYNTAX)
def test_programs_with_semicolons_are_perturbed(task: str, name: str) -> None:
    problem = mbpp()[task]
    variant = apply_seeded(create(name, profile="recode"), problem, 0)
    assert refusal(variant) is None
    assert variant.prompt != recode_partial_problem(problem).prompt
    assert " ( " not in variant.prompt  # black formatted it: no raw tokens


def test_semicolon_statements_of_mbpp_155_before_and_after() -> None:
    variant = apply_seeded(create("OperandSwap", profile="recode"), mbpp()["MBPP/155"], 0)
    program = variant.prompt + variant.canonical_solution
    assert "res = 0; count = 0" not in program and "    res = 0\n    count = 0\n    temp = n\n" in program
    assert "while 0 < temp:" in program  # the swap itself


def test_dead_code_applies_where_the_marker_sits_at_an_odd_indent() -> None:
    problem = mbpp()["MBPP/14"]  # `     # print(...)` under 4-space code
    for seed in range(3):
        variant = apply_seeded(create("DeadCodeInserter", profile="recode"), problem, seed)
        assert refusal(variant) is None and any(s in variant.prompt for s in ("range(0)", "while", "if "))


def test_what_black_cannot_format_is_a_counted_refusal_left_out() -> None:
    problems = [mbpp()[t] for t in ("MBPP/577", "MBPP/14")]  # dead code between `if` and `elif` in 577
    variant = apply_seeded(create("DeadCodeInserter", profile="recode"), problems[0], 0)
    assert refusal(variant) == "black cannot format the transformed program"
    for validate in (False, True):
        result = perturb_problems(problems, ["DeadCodeInserter"], [0], validate_variants=validate, profile="recode",
                                  pool=None if not validate else _Passing())
        stats = result.stats["DeadCodeInserter"]
        assert (stats.variants, stats.refused, stats.changed) == (2, 1, 1)
        assert [v.task_id for v in result.variants[("DeadCodeInserter", 0)]] == ["MBPP/14"]
        assert [(r.task_id, r.reason) for r in result.refusals] == [
            ("MBPP/577", "black cannot format the transformed program")]
        assert result.rejected == [] and result.summary()["transformations"]["DeadCodeInserter"]["refused"] == 1


class _Passing:
    """Every program passes: the refusal is decided before anything runs."""

    def run_many(self, programs: list[str]) -> list:
        from quench.execution import ExecutionResult, Outcome

        return [ExecutionResult(Outcome.passed) for _ in programs]


def test_a_program_that_does_not_parse_is_refused_in_the_default_profile() -> None:
    problem = mbpp()["MBPP/64"]  # its docstring sits at column 0
    variant = apply_seeded(create("OperandSwap"), problem, 0)
    assert refusal(variant) == "the program does not parse"
