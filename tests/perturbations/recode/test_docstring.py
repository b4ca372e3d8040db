"""Profile "recode": NL-Augmenter's word-level docstring edits as ReCode ran them."""

from __future__ import annotations

import difflib
import gzip
import json
import random
from pathlib import Path

import pytest

from quench.datasets import Problem, load_humaneval
from quench.perturbations.base import seeded_rng
from quench.perturbations.catalog import create
from quench.perturbations.recode.docstring import split_docstring, tokens_of, untokenize

RELEASE = Path(__file__).parents[3] / ".." / "shared" / "data" / "recode-release"
PROMPT = ('def count_words(text: str) -> int:\n    """ Count the words of the given text, separated by\n'
          '    single spaces (non-empty words only).\n    >>> count_words("a b")\n    2\n    """\n')
PROBLEM = Problem("t/0", PROMPT, "    return len(text.split())\n", "def check(c):\n    assert c('a b') == 2\n",
                  "count_words")


def test_the_prose_runs_from_after_the_quotes_to_before_the_examples() -> None:
    head, prose, examples = split_docstring(PROMPT, "count_words")
    assert head.endswith('""" ') and prose.startswith("Count the words")  # the space after the quotes stays
    assert prose.endswith("only).") and examples.startswith('\n    >>> count_words("a b")')
    # no `>>>`: everything but the last character, closing quotes included (ReCode writes them back as `" " "`)
    bare = 'def f(x):\n    """ Add one.\n    """\n'
    assert split_docstring(bare, "f") == ('def f(x):\n    """ ', 'Add one.\n    """', "\n")


def test_rebuilding_from_tokens_spaces_line_breaks_and_hyphens() -> None:
    _, prose, _ = split_docstring(PROMPT, "count_words")
    assert untokenize(tokens_of(prose)) == (
        "Count the words of the given text, separated by \n     single spaces (non - empty words only).")
    # spaCy cuts operators made of symbols alone into characters, and NL-Augmenter never rejoins them
    assert untokenize(tokens_of("x == 2 -> y => [1]")) == "x = = 2 - > y = > [ 1 ]"


@pytest.mark.parametrize("name", ["SynonymSubstitution", "SynonymInsertion"])
def test_identifiers_and_examples_stay_and_seeds_are_reproducible(name: str) -> None:
    transform = create(name, profile="recode")
    variants = [transform.apply(PROBLEM, seeded_rng(name, "t/0", seed)).prompt for seed in range(10)]
    assert variants == [transform.apply(PROBLEM, seeded_rng(name, "t/0", seed)).prompt for seed in range(10)]
    for variant in variants:
        assert variant.startswith('def count_words(text: str) -> int:\n    """ ')
        assert variant.endswith('.\n    >>> count_words("a b")\n    2\n    """\n')
    assert len(set(variants)) > 5
    words = [len(v.split()) - len(PROMPT.split()) for v in variants]
    if name == "SynonymInsertion":
        assert all(w >= 0 for w in words) and max(words) > 0  # insertions only add words


def released(category: str, name: str, seed: int) -> dict[str, dict[str, str]]:
    """ReCode's released HumanEval variants of one transformation and seed, by task id."""
    path = RELEASE / "humaneval" / "full" / category / f"humaneval_{name}_s{seed}.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return {row["task_id"]: row for row in map(json.loads, f)}


def edited_words(before: str, after: str) -> int:
    matcher = difflib.SequenceMatcher(None, before.split(), after.split(), autojunk=False)
    return sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal")


@pytest.mark.skipif(not RELEASE.is_dir(), reason="ReCode's released sets are not present")
@pytest.mark.parametrize("name", ["SynonymSubstitution", "SynonymInsertion"])
def test_synonyms_edit_as_much_as_the_release(name: str) -> None:
    problems = load_humaneval()
    transform = create(name, profile="recode")
    ours, theirs = [], []
    for seed in range(10):
        rows = released("nlaugmenter", name, seed)
        for problem in problems:
            ours.append((problem.prompt, transform.apply(problem, seeded_rng(name, problem.task_id, seed)).prompt))
            theirs.append((problem.prompt, rows[problem.task_id]["prompt"]))

    def stats(pairs: list[tuple[str, str]]) -> tuple[float, float]:
        changed = [(a, b) for a, b in pairs if a != b]
        return len(changed) / len(pairs), sum(edited_words(a, b) for a, b in changed) / len(changed)

    (share, words), (release_share, release_words) = stats(ours), stats(theirs)
    assert abs(share - release_share) <= 0.1 * release_share and abs(words - release_words) <= 0.1 * release_words


def test_function_name_typos_follow_nl_augmenters_draws() -> None:
    from quench.perturbations.recode.chars import butter_fingers, change_char_case, swap_characters

    # NL-Augmenter reseeds per text: the same seed gives the same edit whatever the task or order
    assert butter_fingers("has_close_elements", 0) == butter_fingers("has_close_elements", 0)
    assert change_char_case("abc", 3) != "abc" and change_char_case("abc", 3).lower() == "abc"
    assert sorted(swap_characters("separate_paren_groups", 5)) == sorted("separate_paren_groups")
    transform = create("FuncRenameButterFinger", profile="recode")
    renamed = transform.apply_sequence([PROBLEM], 0)[0]
    assert renamed.entry_point == "coujt_words" == butter_fingers("count_words", 0)
    assert renamed.prompt == PROMPT.replace("count_words", "coujt_words")
    assert transform.apply_sequence([PROBLEM], 1)[0] is PROBLEM  # no typo drawn: unchanged, as in ReCode


def test_single_quoted_docstrings_and_keywords_named_in_the_code_stay() -> None:
    prompt = "\ndef f(x):\n    '''\n    Then return x in a list.\n    '''\n"
    head, prose, examples = split_docstring(prompt, "f")
    assert head == "\ndef f(x):\n    '''\n    " and prose == "Then return x in a list.\n    '''" and examples == "\n"
    problem = Problem("t/1", prompt, "    return [x]\n", "def check(c):\n    assert c(1) == [1]\n", "f")
    transform = create("ChangeCharCase", profile="recode")
    for seed in range(5):
        changed = transform.apply_seed(problem, seed).prompt
        # `return` and `in` are ReCode's reserved words (case-sensitive), `x` a variable: never edited
        assert changed[:-16].endswith(" return x in ") and changed.lower() == prompt.lower()


def test_whitespace_draws_once_per_character_names_included() -> None:
    from quench.perturbations.recode.chars import whitespace

    rng = random.Random(4)
    draws = [rng.random() for _ in "a b"]
    expected = "".join(("" if d < 0.1 else c) if c == " " else (c + " " if d < 0.05 else c) for c, d in zip("a b", draws))
    assert whitespace("a b", 4) == expected
    transform = create("WhitespacePerturbation", profile="recode")
    changed = [transform.apply_seed(PROBLEM, seed).prompt for seed in range(10)]
    # unlike the other char-level edits, the names in the prose are not protected: `text` may split
    assert all("".join(p.split()) == "".join(PROMPT.split()) for p in changed) and len(set(changed)) > 5
    assert any("te xt" in p or "t ext" in p or "tex t" in p for p in changed)


@pytest.mark.skipif(not RELEASE.is_dir(), reason="ReCode's released sets are not present")
@pytest.mark.parametrize(("category", "name", "seed"), [
    (category, name, seed)
    for category, names, seeds in [
        ("func_name", ("FuncRenameButterFinger", "FuncRenameChangeChar", "FuncRenameSwapChar"), (1, 7)),
        ("nlaugmenter", ("ButterFingersPerturbation", "ChangeCharCase", "SwapCharactersPerturbation"), (0, 6)),
        ("nlaugmenter", ("WhitespacePerturbation",), (2, 9)),
    ]
    for name in names for seed in seeds
])
def test_char_level_edits_equal_the_release(category: str, name: str, seed: int) -> None:
    rows = released(category, name, seed)
    made = create(name, profile="recode").apply_sequence(load_humaneval(), seed)
    assert [(v.prompt, v.entry_point) for v in made] == [(rows[v.task_id]["prompt"], rows[v.task_id]["entry_point"])
                                                         for v in made]
