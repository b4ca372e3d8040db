"""Code-syntax perturbations: before/after on the partial prompt, consistent hidden rest, no leaks."""

from __future__ import annotations

import pytest

from quench.datasets import Problem, load_mbpp, partial_problem
from quench.perturbations import apply_seeded, create

TAIL = '    """\n'
PARTIAL_BODY = "    words = text_line.split(' ')\n    total = 0\n    for word in words:\n"
HIDDEN = "        if len(word) > max_count:\n            total += 1\n    return total\n"


def body(variant: Problem) -> str:
    """The code after the docstring in the prompt."""
    return variant.prompt.rsplit(TAIL, 1)[1]


def test_the_fixture_splits_as_expected(problem: Problem) -> None:
    partial = partial_problem(problem)
    assert body(partial) == PARTIAL_BODY and partial.canonical_solution == HIDDEN


@pytest.mark.parametrize("name, seed, prompt, rest", [
    ("DeadCodeInserterLast", 0,
     "    words = text_line.split(' ')\n    total = 0\n    if False:\n        words = text_line.split(' ')\n"
     "    for word in words:\n", HIDDEN),
    ("ForWhileTransformer", 0,
     "    words = text_line.split(' ')\n    total = 0\n    _word_i = 0\n    while _word_i < len(words):\n"
     "        word = words[_word_i]\n",
     "        if len(word) > max_count:\n            total += 1\n        _word_i += 1\n    return total\n"),
    ("VarRenamerNaive", 0,
     "    VAR_0 = text_line.split(' ')\n    total = 0\n    for word in VAR_0:\n", HIDDEN),
    ("OperandSwap", 0, PARTIAL_BODY, HIDDEN),  # the only comparison is hidden: no change
])
def test_before_after(problem: Problem, name: str, seed: int, prompt: str, rest: str) -> None:
    variant = apply_seeded(create(name), problem, seed)
    assert body(variant) == prompt
    assert variant.canonical_solution == rest
    assert variant.prompt_kind == "partial" and variant.task_id == problem.task_id


def test_operand_swap_and_range_loop() -> None:
    p = Problem("T/6", "def f(n):\n", "    t = 0\n    for i in range(1, n + 1, 2):\n        if i % 3 == 0 or not i:\n"
                "            t += i\n    return t\n", "", "f")
    swapped = apply_seeded(create("OperandSwap"), p, 0)
    assert swapped.prompt == "def f(n):\n    t = 0\n    for i in range(1, n + 1, 2):\n"
    loop = apply_seeded(create("ForWhileTransformer"), p, 0)
    assert loop.prompt == "def f(n):\n    t = 0\n    i = 1\n    while i < n + 1:\n"
    assert loop.canonical_solution.endswith("            t += i\n        i += 2\n    return t\n")
    full = Problem("T/7", "def f(a, b):\n    c = a <= (b or 1)\n", "    return c\n", "", "f")
    assert apply_seeded(create("OperandSwap"), full, 0).prompt == "def f(a, b):\n    c = (b or 1) >= a\n"


def test_for_loops_with_continue_are_left_alone() -> None:
    p = Problem("T/8", "def f(xs):\n    out = []\n    for x in xs:\n        if x:\n            continue\n",
                "        out.append(x)\n    return out\n", "", "f", prompt_kind="partial")
    assert apply_seeded(create("ForWhileTransformer"), p, 0).prompt == p.prompt


def test_renaming_skips_parameters_named_in_the_docstring(problem: Problem) -> None:
    # `text_line` occurs as often as `words` but the docstring names it: `words` is renamed.
    variant = apply_seeded(create("VarRenamerRN"), problem, 1)
    assert "text_line.split" in variant.prompt and "words =" not in variant.prompt


@pytest.mark.parametrize("name", ["DeadCodeInserter", "DeadCodeInserterLast", "ForWhileTransformer", "OperandSwap",
                                  "VarRenamerNaive", "VarRenamerRN"])
def test_one_line_body_has_no_visible_code(name: str) -> None:
    p = Problem("T/9", "def f(x):\n", "    return x < 1\n", "", "f")
    variant = apply_seeded(create(name), p, 0)
    if name == "VarRenamerNaive":  # the parameter is visible in the signature
        assert (variant.prompt, variant.canonical_solution) == ("def f(VAR_0):\n", "    return VAR_0 < 1\n")
    elif name == "VarRenamerRN":
        assert variant.prompt != p.prompt and len(variant.prompt) == len(p.prompt)
    else:
        assert variant.prompt == p.prompt


@pytest.mark.parametrize("name", ["DeadCodeInserter", "DeadCodeInserterLast"])
def test_dead_code_comes_only_from_the_visible_prompt(name: str) -> None:
    for original in load_mbpp("test")[:60]:
        nominal = partial_problem(original)
        for seed in range(3):
            variant = apply_seeded(create(name), original, seed)
            new_lines = [l for l in variant.prompt.splitlines() if l not in nominal.prompt.splitlines()]
            for line in new_lines:
                text = line.strip()
                if text.startswith(("for _i_", "while ", "if ", "_i_")):
                    continue
                assert text in nominal.prompt, (original.task_id, text)
