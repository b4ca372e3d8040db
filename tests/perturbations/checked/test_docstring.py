"""Docstring perturbations: pinned before/after text, protection of code, and no-change cases."""

from __future__ import annotations

import pytest

from quench.datasets import Problem
from quench.perturbations import DOCSTRING, apply_seeded, create, names
from quench.perturbations.checked import tense
from quench.perturbations.text import docstring_text, segment
from quench.perturbations.validate import check_docstring

ORIGINAL = [
    '    """Return the number of words in `text_line` that are longer than max_count.',
    '    It splits the text on "single spaces" and is case-sensitive.',
]
# Seed 0, pinned: a change in these is a change in every released variant.
EXPECTED = {
    "ButterFingersPerturbation": [
        '    """Return the number of words in `text_line` that are linger than max_count.', ORIGINAL[1]],
    "ChangeCharCase": [
        '    """ReturN tHe nuMBeR Of words iN `text_line` tHaT ARe lOnGeR thAn max_count.',
        '    It spLiTS tHe TexT oN "single spaces" aNd is caSE-sensitIve.'],
    # the summary verb in its descriptive form; nouns keep their number (`the texts` says another thing)
    "EnglishInflectionalVariation": [
        '    """Returns the number of words in `text_line` that are longer than max_count.', ORIGINAL[1]],
    "SwapCharactersPerturbation": [
        ORIGINAL[0], '    It splits the text on "single spaces" adn is case-sensitive.'],
    # no word of these lines has a synonym that reads right here (data/wording.tsv)
    "SynonymInsertion": ORIGINAL,
    "SynonymSubstitution": ORIGINAL,
    # an instruction (`Return ...`) keeps its tense; the description changes
    "TenseTransformationPast": [ORIGINAL[0], '    It split the text on "single spaces" and was case-sensitive.'],
    "TenseTransformationFuture": [ORIGINAL[0], '    It will split the text on "single spaces" and will be case-sensitive.'],
    "WhitespacePerturbation": [
        '    """Retur n then umber of words in `text_line` that are longer than max_count.', ORIGINAL[1]],
}
NON_MODEL = names([DOCSTRING], include_model_based=False)


def doc_lines(problem: Problem) -> list[str]:
    return problem.prompt.split("\n")[1:3]


def test_every_docstring_transformation_is_pinned() -> None:
    assert sorted(EXPECTED) == sorted(NON_MODEL)


@pytest.mark.parametrize("name", NON_MODEL)
def test_seed0_output(problem: Problem, name: str) -> None:
    assert doc_lines(problem) == ORIGINAL
    assert doc_lines(apply_seeded(create(name), problem, 0)) == EXPECTED[name]


@pytest.mark.parametrize("name", NON_MODEL)
@pytest.mark.parametrize("seed", range(10))
def test_only_the_prose_changes_and_code_is_protected(problem: Problem, name: str, seed: int) -> None:
    variant = apply_seeded(create(name), problem, seed)
    assert check_docstring(problem, variant).valid or variant.prompt == problem.prompt
    for kept in ("`text_line`", "max_count", '"single spaces"', '>>> count_words("a bb ccc", 1)\n    2\n    """'):
        assert kept in variant.prompt
    assert variant.canonical_solution == problem.canonical_solution
    assert variant.meta("perturbation") == name and variant.meta("seed") == str(seed)


@pytest.mark.parametrize("name", NON_MODEL)
def test_no_docstring_no_change(name: str) -> None:
    bare = Problem("T/1", "def f(x):\n", "    return x + 1\n", "def check(c):\n    assert c(1) == 2\n", "f")
    assert apply_seeded(create(name), bare, 0).prompt == bare.prompt


@pytest.mark.parametrize("name", NON_MODEL)
def test_only_examples_no_change(name: str) -> None:
    """Text after the first `>>>` is never edited, so a docstring of examples stays as it is."""
    only = Problem("T/2", 'def f(x):\n    """>>> f(1)\n    2\n    """\n', "    return x + 1\n", "", "f")
    assert apply_seeded(create(name), only, 3).prompt == only.prompt


def test_protection_rules() -> None:
    text = "Sort the list my_list in O(n log n) using cost[][] and 'quoted text', see\n    f(x) == 2 for example."
    words = [p.text for p in segment(text, frozenset({"my_list"})) if p.kind == "word"]
    assert words == ["Sort", "the", "list", "in", "log", "n", "using", "and", "see"]  # example line: untouched


def test_docstring_span_stops_before_examples(problem: Problem) -> None:
    doc = docstring_text(problem)
    assert doc is not None
    assert problem.prompt[doc.start:doc.end].endswith("case-sensitive.")
    assert problem.prompt[doc.start:doc.end].startswith("Return the number")


@pytest.mark.parametrize("before, past, future", [
    ("It returns the sum.", "It returned the sum.", "It will return the sum."),
    # an instruction keeps its tense; no `will` in a conditional clause (`if the list will be empty`)
    ("Return True if the list is empty.", "Return True if the list is empty.", "Return True if the list is empty."),
    ("It returns True if the list is empty.", "It returned True if the list was empty.",
     "It will return True if the list is empty."),
    ("The function does not sort.", "The function did not sort.", "The function will not sort."),
    ("The numbers differ.", "The numbers differed.", "The numbers will differ."),
    ("Sort the list and return it.", "Sort the list and return it.", "Sort the list and return it."),
])
def test_tense_rules(before: str, past: str, future: str) -> None:
    pieces = segment(before, frozenset())
    assert tense.transform(pieces, "past") == past
    assert tense.transform(pieces, "future") == future
