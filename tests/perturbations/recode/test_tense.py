"""Profile "recode": tenseflow's tense shift as ReCode ran it (every verb after the first word)."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

from quench.datasets import Problem, load_humaneval
from quench.perturbations.base import seeded_rng
from quench.perturbations.catalog import create
from quench.perturbations.recode.tense import joined

RELEASE = Path(__file__).parents[3] / ".." / "shared" / "data" / "recode-release"
HEAD = "def f(numbers: list, threshold: float) -> bool:\n    \"\"\" "
PROMPT = (HEAD + "Check if in given list of numbers, are any two numbers closer to each other than\n"
          "    given threshold. It can be decomposed.\n    >>> f([1.0, 2.0], 0.5)\n    False\n    \"\"\"\n")
PROBLEM = Problem("t/0", PROMPT, "    return False\n", "def check(c):\n    assert not c([1.0], 0.5)\n", "f")


def shifted(name: str, problem: Problem = PROBLEM) -> str:
    return create(name, profile="recode").apply(problem, seeded_rng(name, problem.task_id, 0)).prompt


def test_past_conjugates_participles_and_the_copula_as_humaneval_0_in_the_release() -> None:
    assert shifted("TenseTransformationPast") == (
        HEAD + "Check if in gave list of numbers, was any two numbers closer to each other than \n"
        "     gave threshold. It can was decomposed.\n    >>> f([1.0, 2.0], 0.5)\n    False\n    \"\"\"\n")


def test_future_puts_will_before_the_base_form_unless_after_will_or_be() -> None:
    assert shifted("TenseTransformationFuture") == (
        HEAD + "Check if in will give list of numbers, will be any two numbers closer to each other than \n"
        "     will give threshold. It can will be decompose.\n    >>> f([1.0, 2.0], 0.5)\n    False\n    \"\"\"\n")


def test_punctuation_is_rejoined_and_names_stay() -> None:
    assert joined(["a", "(", "b", ")", ",", "c", "'s", "n't", "."]) == "a (b), c'sn't."
    named = PROBLEM.with_changes(prompt=PROMPT.replace("given threshold", "threshold given"))
    assert "than \n     threshold gave." in shifted("TenseTransformationPast", named)  # `threshold` is a parameter
    gerund = PROBLEM.with_changes(prompt=PROMPT.replace("given threshold", "floating threshold"))
    assert "than \n     floating threshold" in shifted("TenseTransformationPast", gerund)  # a gerund stays


@pytest.mark.skipif(not RELEASE.is_dir(), reason="ReCode's released sets are not present")
@pytest.mark.parametrize("name", ["TenseTransformationPast", "TenseTransformationFuture"])
def test_changed_share_and_edit_size_are_the_releases(name: str) -> None:
    sys.path.insert(0, str(Path(__file__).parents[3] / "benchmarks"))
    from recode_fidelity import edited_words

    with gzip.open(RELEASE / "humaneval" / "full" / "nlaugmenter" / f"humaneval_{name}_s0.jsonl.gz", "rt") as f:
        released = {row["task_id"]: row["prompt"] for row in map(json.loads, f)}
    ours, theirs = [], []
    for problem in load_humaneval():
        made = shifted(name, problem)
        ours += [edited_words(problem.prompt, made)] if made != problem.prompt else []
        theirs += [edited_words(problem.prompt, released[problem.task_id])] if released[problem.task_id] != problem.prompt else []
    assert abs(len(ours) - len(theirs)) <= 0.1 * len(theirs)
    assert abs(sum(ours) / len(ours) - sum(theirs) / len(theirs)) <= 0.1 * sum(theirs) / len(theirs)
