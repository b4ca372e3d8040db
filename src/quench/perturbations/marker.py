"""ReCode's split marker: the comment line that marks, in a whole program, where the partial-code prompt ends.

ReCode's code-syntax and code-format sets carry the marked program under `partial` (`release.py`),
and its code-syntax transformations rewrite the marked program (`recode/code_syntax.py`).
"""

from __future__ import annotations

from typing import Callable

from quench.datasets import Problem, partial_problem

MARKER = "# print('@@this is the line to split##')"


def leading_blanks(line: str) -> str:
    return line[:len(line) - len(line.lstrip(" \t"))]


def marked_program(original: Problem, partial: Callable[[Problem], Problem] = partial_problem) -> str | None:
    """ReCode's `partial`: the unperturbed program with the split marker, None without a split.

    The marker takes the deeper of the indentation of the line before and the line after the cut.
    """
    split = partial(original)
    if split.prompt == original.prompt and split.canonical_solution == original.canonical_solution:
        return None
    after = leading_blanks(split.canonical_solution)
    head = split.prompt[:-1] if split.prompt.endswith("\n") else split.prompt
    before = leading_blanks(head[head.rfind("\n") + 1:])
    indent = after if len(before) < len(after) else before
    return f"{split.prompt}{indent}{MARKER}\n{split.canonical_solution}"
