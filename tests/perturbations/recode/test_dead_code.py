"""Profile "recode": NatGen's dead code as ReCode inserted it (where, what, how it is wrapped)."""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path

import pytest

from quench.datasets import Problem, load_humaneval
from quench.datasets.partial import recode_partial_problem
from quench.perturbations.base import seeded_rng
from quench.perturbations.catalog import create

RELEASE = Path(__file__).parents[3] / ".." / "shared" / "data" / "recode-release"
PROMPT = 'def f(x):\n    """Add one.\n\n    >>> f(1)\n    2\n    """\n'
PROBLEM = Problem("t/0", PROMPT, "    y = x + 1\n\n    z = y\n    return z\n",
                  "def check(candidate):\n    assert candidate(1) == 2\n", "f")
HEADERS = re.compile(r"    (for _i_\d in range\(0\):|(while|if) False:|_i_(\d) = 0\n    (while|if) _i_\3 [<>] _i_\3:)\n")


def variants(name: str, problem: Problem = PROBLEM, seeds: int = 12) -> list[Problem]:
    transform = create(name, profile="recode")
    return [transform.apply(problem, seeded_rng(name, problem.task_id, seed)) for seed in range(seeds)]


def test_last_inserts_before_the_marker_any_statement_hidden_ones_included() -> None:
    bodies = set()
    for variant in variants("DeadCodeInserterLast"):
        assert variant.prompt.startswith(PROMPT + "    y = x + 1\n") and variant.prompt.endswith("\n   \n")
        dead = variant.prompt[len(PROMPT) + len("    y = x + 1\n"):-len("   \n")]
        header = HEADERS.match(dead)
        assert header, dead
        bodies.add(dead[header.end():])
        assert variant.canonical_solution == "# print('@@this is the line to split##')\n    z = y\n    return z\n"
    # the hidden `z = y` and `return z` are copied into the prompt, as in ReCode's release
    assert bodies == {"        y = x + 1\n", "        z = y\n", "        return z\n"}


def test_random_position_lies_before_the_marker_and_one_line_ifs_open_a_block() -> None:
    positions = {v.prompt.find("    y = x + 1\n") > len(PROMPT) for v in variants("DeadCodeInserter")}
    assert positions == {True, False}  # before `y = x + 1` or before the marker
    body = "    if x < 0: return x\n    y = x + 1\n    return y\n"
    for variant in variants("DeadCodeInserterLast", Problem("t/1", PROMPT, body, PROBLEM.test, "f")):
        compile(variant.prompt + "    pass\n", "prompt", "exec")  # formatted by black: still Python


def test_a_one_line_body_is_left_alone() -> None:
    problem = Problem("t/2", PROMPT, "    return x + 1\n", PROBLEM.test, "f")
    assert all(v.prompt == recode_partial_problem(problem).prompt for v in variants("DeadCodeInserter", problem, 3))


@pytest.mark.skipif(not RELEASE.is_dir(), reason="ReCode's released sets are not present")
def test_changed_share_and_edit_size_are_the_releases() -> None:
    sys.path.insert(0, str(Path(__file__).parents[3] / "benchmarks"))
    from recode_fidelity import edited_words

    with gzip.open(RELEASE / "nominal" / "humaneval_partial.jsonl.gz", "rt", encoding="utf-8") as f:
        nominal = {row["task_id"]: row["prompt"] for row in map(json.loads, f)}
    path = RELEASE / "humaneval" / "full" / "natgen" / "humaneval_DeadCodeInserterLast_s0.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        released = {row["task_id"]: row["prompt"] for row in map(json.loads, f)}
    ours, theirs = [], []
    for problem in load_humaneval():
        base = nominal[problem.task_id]
        made = [v.prompt for v in variants("DeadCodeInserterLast", problem, 3)]
        ours += [edited_words(base, m) for m in made if m != base]
        theirs += [edited_words(base, released[problem.task_id])] if released[problem.task_id] != base else []
    assert abs(len(ours) / 3 - len(theirs)) <= 0.05 * len(theirs)
    assert abs(sum(ours) / len(ours) - sum(theirs) / len(theirs)) <= 0.1 * sum(theirs) / len(theirs)
