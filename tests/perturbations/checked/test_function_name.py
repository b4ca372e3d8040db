"""Function-name perturbations: the name changes everywhere it is the entry point, nowhere else."""

from __future__ import annotations

import random

import pytest

from quench.datasets import Problem
from quench.perturbations import FUNCTION_NAME, apply_seeded, create, names
from quench.perturbations.checked.function_name import FuncRenameCamelCase, name_words, rename

EXPECTED = {  # seed 0, pinned
    "FuncRenameCamelCase": "countWords",
    "FuncRenameButterFinger": "count_worxs",
    "FuncRenameSwapChar": "ocunt_words",
    "FuncRenameChangeChar": "CounT_wOrdS",
    "FuncRenameInflectionalVariation": "counts_words",
    "FuncRenameSynonymSub": "enumerate_words",
}
RECURSIVE = Problem(
    "T/3", 'def fact_of(n):\n    """Factorial.\n    >>> fact_of(3)\n    6\n    """\n',
    "    return 1 if n < 2 else n * fact_of(n - 1)\n", "def check(candidate):\n    assert candidate(3) == 6\n", "fact_of",
)


def test_every_function_name_transformation_is_pinned() -> None:
    assert sorted(EXPECTED) == sorted(names([FUNCTION_NAME]))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_seed0_name(problem: Problem, name: str) -> None:
    variant = apply_seeded(create(name), problem, 0)
    new = EXPECTED[name]
    assert variant.entry_point == new
    assert f"def {new}(text_line, max_count):" in variant.prompt
    assert f">>> {new}(\"a bb ccc\", 1)" in variant.prompt
    assert "count_words" not in variant.prompt + variant.canonical_solution
    assert variant.test == problem.test and variant.task_id == problem.task_id


def test_recursion_is_renamed_and_still_passes(runner) -> None:
    variant = apply_seeded(create("FuncRenameCamelCase"), RECURSIVE, 0)
    assert variant.entry_point == "factOf"
    assert "factOf(n - 1)" in variant.canonical_solution
    assert runner.run_many([variant.reference_program()])[0].passed


def test_camel_case_goes_both_ways() -> None:
    rng = random.Random(0)
    assert FuncRenameCamelCase().new_name("hasCloseElements", rng) == "has_close_elements"
    assert FuncRenameCamelCase().new_name("has_close_elements", rng) == "hasCloseElements"
    assert FuncRenameCamelCase().new_name("median", rng) == "median"  # one word: no change
    assert name_words("differ_At_One_Bit_Pos") == ["differ", "At", "One", "Bit", "Pos"]


def test_rename_refuses_names_already_taken(problem: Problem) -> None:
    assert rename(problem, "max_count") is problem  # a parameter
    assert rename(problem, "len") is problem  # a builtin
    assert rename(problem, "class") is problem  # a keyword
    assert rename(problem, "2bad") is problem


def test_attribute_and_longer_names_are_not_touched() -> None:
    p = Problem("T/4", "def f(x):\n", "    return x.f + ff(x)\n", "", "f")
    assert rename(p, "g").canonical_solution == "    return x.f + ff(x)\n"


@pytest.mark.parametrize("name", ["FuncRenameButterFinger", "FuncRenameSwapChar", "FuncRenameChangeChar"])
def test_character_noise_always_changes_the_name(name: str) -> None:
    p = Problem("T/5", "def add(a, b):\n", "    return a + b\n", "", "add")
    assert all(apply_seeded(create(name), p, seed).entry_point != "add" for seed in range(10))
