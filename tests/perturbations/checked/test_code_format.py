"""Code-format perturbations: before/after on the partial prompt, strings never touched."""

from __future__ import annotations

import pytest

from quench.datasets import Problem, partial_problem
from quench.perturbations import apply_seeded, create

HIDDEN = "        if len(word) > max_count:\n            total += 1\n    return total\n"


@pytest.mark.parametrize("name, expected_tail, rest", [
    ("new_line_aftercode", "    for word in words:\n\n", HIDDEN),
    ("new_line_afterdoc", '    2\n    """\n\n    words = text_line.split(\' \')\n', HIDDEN),
    ("split_lines", "    words = \\\n        text_line.split(' ')\n    total = 0\n    for word in words:\n", HIDDEN),
    ("new_lines", "\n\n    words = text_line.split(' ')\n\n    total = 0\n\n    for word in words:\n", HIDDEN),
])
def test_before_after(problem: Problem, name: str, expected_tail: str, rest: str) -> None:
    variant = apply_seeded(create(name), problem, 0)
    assert variant.prompt.endswith(expected_tail) or expected_tail in variant.prompt
    assert variant.canonical_solution == rest


def test_doc2comments(problem: Problem) -> None:
    variant = apply_seeded(create("doc2comments"), problem, 0)
    assert variant.prompt == (
        "def count_words(text_line, max_count):\n"
        "    # Return the number of words in `text_line` that are longer than max_count.\n"
        "    # It splits the text on \"single spaces\" and is case-sensitive.\n"
        "    # >>> count_words(\"a bb ccc\", 1)\n"
        "    # 2\n"
        "    words = text_line.split(' ')\n    total = 0\n    for word in words:\n"
    )


def test_tab_indent_both_ways(problem: Problem) -> None:
    tabs = apply_seeded(create("tab_indent"), problem, 0)
    assert tabs.prompt.endswith("\twords = text_line.split(' ')\n\ttotal = 0\n\tfor word in words:\n")
    assert tabs.canonical_solution == "\t\tif len(word) > max_count:\n\t\t\ttotal += 1\n\treturn total\n"
    back = apply_seeded(create("tab_indent"), tabs, 0)
    assert (back.prompt, back.canonical_solution) == (partial_problem(problem).prompt, HIDDEN)


def test_tab_indent_uses_block_depth_for_mixed_widths() -> None:
    p = Problem("T/1", "def f(s):\n    if s:\n      return 1\n", "    return 0\n", "", "f")
    variant = apply_seeded(create("tab_indent"), p, 0)
    assert variant.prompt == "def f(s):\n\tif s:\n\t\treturn 1\n" and variant.canonical_solution == "\treturn 0\n"


def test_strings_are_never_edited() -> None:
    code = 'def f():\n    """Doc."""\n    s = """a\n  b\n"""\n    t = 1\n'
    p = Problem("T/2", code, "    return s, t\n", "", "f")
    for name in ("tab_indent", "new_lines", "split_lines"):
        for seed in range(5):
            variant = apply_seeded(create(name), p, seed)
            assert '"""a\n  b\n"""' in variant.prompt, name


def test_no_docstring_no_doc_changes() -> None:
    p = Problem("T/3", "def f(x):\n    y = x\n", "    return y\n", "", "f")
    assert apply_seeded(create("doc2comments"), p, 0).prompt == p.prompt
    assert apply_seeded(create("new_line_afterdoc"), p, 0).prompt == p.prompt
