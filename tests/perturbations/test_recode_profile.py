"""Profile "recode": ReCode's partial split and transformations, before/after strings and the release itself."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest

from quench.datasets import Problem, load_humaneval
from quench.datasets.partial import recode_cut, recode_partial_problem
from quench.errors import QuenchError
from quench.perturbations import perturb_problems
from quench.perturbations.base import seeded_rng
from quench.perturbations.catalog import create
from quench.perturbations.profile import QUENCH, RECODE, resolve_profile
from quench.perturbations.recode.code_format import doc2comments, new_lines, split_lines, tab_indent
from quench.perturbations.release import marked_program

RELEASE = Path(__file__).parents[2] / ".." / "shared" / "data" / "recode-release"

PROMPT = 'def f(x):\n    """Add one.\n    \n    >>> f(1)\n    2\n    """\n'
BODY = "    y = x + 1\n\n    z = y\n    return z\n"
PROBLEM = Problem("t/0", PROMPT, BODY, "def check(candidate):\n    assert candidate(1) == 2\n", "f")


def recode(name: str, problem: Problem = PROBLEM, seed: int = 0) -> Problem:
    return create(name, profile="recode").apply(problem, seeded_rng(name, problem.task_id, seed))


def test_the_split_counts_blank_lines_and_cuts_at_half() -> None:
    partial = recode_partial_problem(PROBLEM)
    assert partial.prompt == PROMPT + "    y = x + 1\n\n"  # 4 body lines, the blank one included: cut after 2
    assert partial.canonical_solution == "    z = y\n    return z\n" and partial.prompt_kind == "partial"
    one_line = Problem("t/1", PROMPT, "    return x + 1\n", PROBLEM.test, "f")
    assert recode_cut(PROMPT + one_line.canonical_solution, "f") is None
    assert recode_partial_problem(one_line).prompt == PROMPT


def test_the_marker_takes_the_deeper_indentation_around_the_cut() -> None:
    nested = Problem("t/2", PROMPT, "    if x:\n        y = 1\n    return x\n    pass\n", PROBLEM.test, "f")
    assert marked_program(nested, recode_partial_problem) == (
        PROMPT + "    if x:\n        y = 1\n        # print('@@this is the line to split##')\n    return x\n    pass\n")


def test_tab_indent_replaces_each_leading_unit() -> None:
    code = 'def f(x):\n    """Doc.\n      more\n    """\n    if x:\n\n        return 1\n'
    assert tab_indent(code, "f") == 'def f(x):\n\t"""Doc.\n\t  more\n\t"""\n\tif x:\n\n\t\treturn 1\n'
    assert tab_indent('def f(x):\n\treturn [\n\t\t1]\n', "f") == 'def f(x):\n    return [\n        1]\n'


def test_split_lines_breaks_the_longest_line_before_its_middle_word() -> None:
    assert recode("split_lines").prompt == PROMPT + "    y =  \\\n  x + 1\n\n"
    # words split on single spaces: a string is kept whole, the character after it is dropped (as ReCode)
    code = 'def g(s):\n    """\n    Doc.\n    """\n    return s == "a b" or s\n'
    assert split_lines(code, "g") == 'def g(s):\n    """\n    Doc.\n    """\n    return s ==  \\\n  "a b"or s\n'
    # a line holding both quotes toggles ReCode's docstring state once: what follows counts as docstring
    one_line = 'def h(s):\n    """Doc."""\n    return s == 1 or s\n'
    assert split_lines(one_line, "h") == one_line


def test_doc2comments_keeps_whitespace_only_lines_as_hash_two_spaces() -> None:
    assert doc2comments(PROMPT, "f") == "def f(x):\n    # Add one.\n    #  \n    # >>> f(1)\n    # 2\n"


def test_new_lines_after_code_and_after_the_docstring() -> None:
    partial = recode_partial_problem(PROBLEM).prompt
    assert recode("new_line_aftercode").prompt == partial + "\n"
    assert recode("new_line_afterdoc").prompt == partial.replace('    """\n', '    """\n\n', 1)
    assert recode("new_line_afterdoc").canonical_solution == recode_partial_problem(PROBLEM).canonical_solution


def test_new_lines_draws_one_generator_over_the_problems_in_order() -> None:
    problems = [PROBLEM, PROBLEM.with_changes(task_id="t/9")]
    made = perturb_problems(problems, ["new_lines"], [3], validate_variants=False, profile="recode")
    rng = random.Random(42 + 3)
    expected = [new_lines(recode_partial_problem(p).prompt, "f", rng) for p in problems]
    assert [v.prompt for v in made.variants[("new_lines", 3)]] == expected


def test_code_syntax_takes_the_first_candidate_in_tree_order_even_when_hidden() -> None:
    body = "    for i in range(2, x):\n        if i > 1:\n            x -= 1\n    while x < 0:\n        x += 1\n    return x == 2\n"
    problem = Problem("t/3", PROMPT, body, PROBLEM.test, "f")
    swapped = recode("OperandSwap", problem)
    # breadth first, `x < 0` (the hidden while's condition) comes before `i > 1`: the prompt keeps its text
    assert swapped.prompt == ('def f(x):\n    """Add one.\n\n    >>> f(1)\n    2\n    """\n'
                              "    for i in range(2, x):\n        if i > 1:\n            x -= 1\n           \n")
    assert swapped.canonical_solution == (
        "# print('@@this is the line to split##')\n    while 0 > x:\n        x += 1\n    return x == 2\n")
    loop = recode("ForWhileTransformer", problem)
    assert loop.prompt.endswith('    """\n    i = 2\n    while i < x:\n        if i > 1:\n            x -= 1\n           \n')
    assert loop.canonical_solution.startswith("# print('@@this is the line to split##')\n        i += 1\n    while x < 0:")


def test_var_renamer_naive_renames_the_most_frequent_variable_signature_included() -> None:
    renamed = recode("VarRenamerNaive")
    assert renamed.prompt.startswith('def f(VAR_0):\n    """Add one.') and "y = VAR_0 + 1" in renamed.prompt
    assert renamed.prompt.endswith("    y = VAR_0 + 1\n   \n")  # the marker's indentation less one space ends it
    assert renamed.canonical_solution == "# print('@@this is the line to split##')\n    z = y\n    return z\n"


def test_var_renamer_rn_draws_one_generator_over_the_problems_in_order() -> None:
    from quench.perturbations.recode.code_syntax import random_name

    problems = [PROBLEM, PROBLEM.with_changes(task_id="t/9")]
    made = perturb_problems(problems, ["VarRenamerRN"], [2], validate_variants=False, profile="recode")
    rng = random.Random(42 + 2)
    first, second = random_name(1, rng), random_name(1, rng)  # `x` is renamed; the second task continues the stream
    assert [v.prompt.split("\n")[0] for v in made.variants[("VarRenamerRN", 2)]] == [f"def f({first}):", f"def f({second}):"]


def test_profiles_resolve_by_name_and_refuse_others() -> None:
    assert resolve_profile("recode") is RECODE and resolve_profile(QUENCH) is QUENCH
    with pytest.raises(QuenchError, match="--profile 'nlaugmenter': choose one of quench, recode"):
        resolve_profile("nlaugmenter")


def read_release(path: Path) -> dict[str, dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return {row["task_id"]: row for row in map(json.loads, f)}


@pytest.mark.skipif(not RELEASE.is_dir(), reason="ReCode's released sets are not present")
def test_matches_the_humaneval_release() -> None:
    problems = load_humaneval()
    nominal = read_release(RELEASE / "nominal" / "humaneval_partial.jsonl.gz")
    assert all(recode_partial_problem(p).prompt == nominal[p.task_id]["prompt"] for p in problems)
    # at least: every problem but the one whose released split kept a comma ReCode's code drops
    # (HumanEval/105), the two whose dicts ReCode's tokenizer mangled, and VarRenamerNaive's ties
    # (ReCode broke them by Python's per-process string hash order)
    floors = {"format/tab_indent": 164, "format/doc2comments": 164, "format/new_line_aftercode": 164,
              "format/new_line_afterdoc": 164, "format/split_lines": 163, "format/new_lines": 164,
              "natgen/ForWhileTransformer": 161, "natgen/OperandSwap": 158, "natgen/VarRenamerNaive": 144}
    for path, floor in floors.items():
        category, name = path.split("/")
        released = read_release(RELEASE / "humaneval" / "full" / category / f"humaneval_{name}_s0.jsonl.gz")
        made = perturb_problems(problems, [name], [0], validate_variants=False, profile="recode")
        same = sum(v.prompt == released[v.task_id]["prompt"] for v in made.variants[(name, 0)])
        assert same >= floor, (name, same)
