"""The meaning check: static verdicts for docstrings, executed references for code and names."""

from __future__ import annotations

from quench.datasets import Problem
from quench.perturbations import CODE_FORMAT, CODE_SYNTAX, DOCSTRING, FUNCTION_NAME, apply_seeded, create, validate
from quench.perturbations.source import cached_partial
from quench.perturbations.validate import changed_region, check_docstring


def test_changed_region() -> None:
    assert changed_region("abcdef", "abXYef") == (2, 4)
    assert changed_region("abc", "abc") == (3, 3)
    assert changed_region("aaa", "aaaa") == (3, 3)


def test_docstring_edits_outside_the_prose_are_rejected(problem: Problem) -> None:
    inside = problem.with_changes(prompt=problem.prompt.replace("Return the number", "Give the number"))
    assert check_docstring(problem, inside).valid
    example = problem.with_changes(prompt=problem.prompt.replace('("a bb ccc", 1)', '("a bb ccc", 2)'))
    assert check_docstring(problem, example).reason == "edited outside the docstring prose"
    code = problem.with_changes(prompt=problem.prompt.replace("max_count):", "limit):"))
    assert not check_docstring(problem, code).valid


def test_verdicts_with_execution(problem: Problem, runner) -> None:
    renamed = apply_seeded(create("FuncRenameCamelCase"), problem, 0)
    broken = renamed.with_changes(canonical_solution=renamed.canonical_solution.replace("total += 1", "total += 2"))
    unchanged = cached_partial(problem)
    syntax = apply_seeded(create("VarRenamerNaive"), problem, 0)
    half_renamed = syntax.with_changes(canonical_solution=syntax.canonical_solution.replace("total", "VAR_1"))
    verdicts = validate([
        (problem, renamed, FUNCTION_NAME), (problem, broken, FUNCTION_NAME), (problem, unchanged, CODE_FORMAT),
        (problem, syntax, CODE_SYNTAX), (problem, half_renamed, CODE_SYNTAX),
        (problem, apply_seeded(create("ChangeCharCase"), problem, 0), DOCSTRING),
    ], runner)
    assert [v.valid for v in verdicts] == [True, False, True, True, False, True]
    assert [v.changed for v in verdicts] == [True, True, False, True, True, True]
    assert verdicts[1].reason == "reference failed"


def test_a_failing_nominal_reference_rejects_its_variants(problem: Problem, runner) -> None:
    wrong = problem.with_changes(test="def check(candidate):\n    assert False\n")
    variant = apply_seeded(create("tab_indent"), wrong, 0)
    assert validate([(wrong, variant, CODE_FORMAT)], runner)[0].reason == "the nominal reference fails"
