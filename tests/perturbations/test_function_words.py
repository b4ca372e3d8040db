"""Word-level docstring edits touch content words only: never `a` -> `angstrom`, `by` -> `past`."""

from __future__ import annotations

import functools
import re

import pytest

from quench.datasets import Problem, load_humaneval, load_mbpp
from quench.perturbations.base import apply_seeded
from quench.perturbations.catalog import create
from quench.perturbations.recode.docstring import is_content_word, tokens_of
from quench.perturbations.words import AUXILIARY_VERBS, FUNCTION_WORDS

PROFILES = ("quench", "recode")
# ReCode's tagger calls copula and possession (`is a prime`, `has a length`) verbs: its release replaces them.
ALLOWED = {"quench": frozenset(), "recode": AUXILIARY_VERBS}
EDITS = ("SynonymSubstitution", "SynonymInsertion")
PROMPT = ('def f(xs: list) -> list:\n    """ Return a large list of the numbers in xs that are sorted by a key, one by one,\n'
          '    and remove the rest;\n'
          '    it is a big list which is not given by you and it has been checked.\n    >>> f([1])\n    [1]\n    """\n')
PROBLEM = Problem("t/0", PROMPT, "    return xs\n", "def check(c):\n    assert c([1]) == [1]\n", "f")


@functools.cache
def problem_sets() -> dict[str, list[Problem]]:
    return {"HumanEval": load_humaneval(), "MBPP": load_mbpp(None)}


def words_of(text: str) -> list[str]:
    """Runs of letters, lower case: ReCode's rebuild may glue punctuation on (`by'.'`)."""
    return re.findall(r"[a-z]+", text.lower())


def lost_function_words(before: str, after: str, allowed: frozenset[str] = frozenset()) -> list[str]:
    """The closed-class words of `before` (less `allowed`) that `after` no longer has in order:
    a replaced `a` is missing from `after`; inserted synonyms may add words but never remove one."""
    wanted = [w for w in words_of(before) if w in FUNCTION_WORDS - allowed]
    words = iter(words_of(after))
    return [w for w in wanted if not any(w == x for x in words)]


def pairs_after_function_words(text: str) -> set[tuple[str, str]]:
    words = words_of(text)
    return {(a, b) for a, b in zip(words, words[1:]) if a in FUNCTION_WORDS - AUXILIARY_VERBS}


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("name", EDITS)
def test_articles_prepositions_pronouns_and_auxiliaries_stay(profile: str, name: str) -> None:
    transform = create(name, profile=profile)
    variants = [apply_seeded(transform, PROBLEM, seed).prompt for seed in range(20)]
    assert len(set(variants)) > 1  # content words do change (quench inserts one synonym a sentence)
    for variant in variants:
        assert "angstrom" not in variant and "ampere" not in variant and "past" not in variant
        assert lost_function_words(PROMPT, variant, ALLOWED[profile]) == []
        assert "has been" in variant and "is not" in variant and " by you" in variant
        if name == "SynonymInsertion":  # nothing inserted after a function word
            assert pairs_after_function_words(PROMPT) <= pairs_after_function_words(variant)


def test_only_content_words_count_for_recodes_tagger() -> None:
    words = tokens_of("It is a list that is sorted by a key, and it has been checked; it is not given.")
    content = [w for i, w in enumerate(words) if is_content_word(w, words[i + 1:])]
    # copula `is` (before `a`) is a verb to ReCode's tagger; `is sorted`, `has been`, `is not given` are auxiliaries
    # (`sorted` is not in the shipped lexicon's tagged senses: never edited)
    assert content == ["is", "list", "key", "checked", "given"]


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("name", EDITS)
def test_no_function_word_is_edited_on_humaneval_and_mbpp(profile: str, name: str) -> None:
    transform = create(name, profile=profile)
    for benchmark, problems in problem_sets().items():
        for seed in (0, 1, 2):
            found = {}
            for problem in problems:
                edits = lost_function_words(problem.prompt, apply_seeded(transform, problem, seed).prompt,
                                            ALLOWED[profile])
                if edits:
                    found[problem.task_id] = edits
            assert not found, f"{benchmark} seed {seed}: {len(found)} prompts, e.g. {list(found.items())[:3]}"
