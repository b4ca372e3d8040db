"""Profile "recode": NL-Augmenter's inflections as ReCode ran them (draws, token joins, names)."""

from __future__ import annotations

import gzip
import json
import random
import sys
from pathlib import Path

import pytest

from quench.datasets import Problem, load_humaneval
from quench.perturbations.catalog import create
from quench.perturbations.recode.inflection import inflect_text

RELEASE = Path(__file__).parents[3] / ".." / "shared" / "data" / "recode-release"
PROMPT = ('def has_close_elements(numbers: list, threshold: float) -> bool:\n    """ Check if in given list of numbers,\n'
          '    are any two closer than threshold.\n    >>> has_close_elements([1.0, 2.0], 0.5)\n    False\n    """\n')
PROBLEM = Problem("t/0", PROMPT, "    return False\n", "def check(c):\n    assert not c([1.0, 2.0], 0.5)\n",
                  "has_close_elements")


@pytest.mark.parametrize("seed", range(6))
def test_a_word_takes_the_form_drawn_with_seed_plus_its_length(seed: int) -> None:
    forms = ["gave", "given", "giving", "gives", "give", "give"]  # lemminflect's order for `give`
    assert inflect_text("given", seed) == forms[int(random.Random(seed + 5).random() * len(forms))]


def test_tokens_are_joined_by_one_space_where_the_text_had_whitespace() -> None:
    assert inflect_text("of,\n    of (of) <|||>.", 0) == "of, of (of) <|||>."


def test_docstring_prose_comes_back_on_one_line_names_kept() -> None:
    variant = create("EnglishInflectionalVariation", profile="recode").apply_sequence([PROBLEM], 0)[0]
    head, _, rest = variant.prompt.partition('""" ')
    prose, _, examples = rest.partition("\n    >>>")
    # indentation collapses to one space; a masked name (`numbers,\n`) comes back with what followed it
    assert head == PROMPT.partition('""" ')[0] and prose.endswith(" threshold.") and "\n " not in prose.replace(",\n ", "")
    assert " gives list of numbers,\n are " in prose  # seed 0 draws `gives` for `given` (5 letters)
    assert examples == " has_close_elements([1.0, 2.0], 0.5)\n    False\n    \"\"\"\n"


def test_function_name_words_are_inflected_and_replaced_everywhere() -> None:
    transform = create("FuncRenameInflectionalVariation", profile="recode")
    renamed = transform.apply_sequence([PROBLEM], 0)[0]
    assert renamed.entry_point == "had_close_elements"  # ReCode's s0 starts with `had_` too
    assert renamed.prompt == PROMPT.replace("has_close_elements", "had_close_elements")
    camel = PROBLEM.with_changes(prompt=PROMPT.replace("has_close_elements", "hasCloseElements"),
                                 entry_point="hasCloseElements")
    assert transform.apply_sequence([camel], 0)[0].entry_point == "hadCloseElements"


@pytest.mark.skipif(not RELEASE.is_dir(), reason="ReCode's released sets are not present")
@pytest.mark.parametrize("name,folder", [("EnglishInflectionalVariation", "nlaugmenter"),
                                         ("FuncRenameInflectionalVariation", "func_name")])
def test_changed_share_and_edit_size_are_the_releases(name: str, folder: str) -> None:
    sys.path.insert(0, str(Path(__file__).parents[3] / "benchmarks"))
    from recode_fidelity import edited_words

    problems = load_humaneval()
    transform = create(name, profile="recode")
    ours, theirs = [], []
    for seed in range(10):
        with gzip.open(RELEASE / "humaneval" / "full" / folder / f"humaneval_{name}_s{seed}.jsonl.gz", "rt") as f:
            released = {row["task_id"]: row["prompt"] for row in map(json.loads, f)}
        for problem, variant in zip(problems, transform.apply_sequence(problems, seed)):
            ours += [edited_words(problem.prompt, variant.prompt)] if variant.prompt != problem.prompt else []
            theirs += [edited_words(problem.prompt, released[problem.task_id])] if released[problem.task_id] != problem.prompt else []
    assert abs(len(ours) - len(theirs)) <= 0.1 * len(theirs)
    assert abs(sum(ours) / len(ours) - sum(theirs) / len(theirs)) <= 0.1 * sum(theirs) / len(theirs)
