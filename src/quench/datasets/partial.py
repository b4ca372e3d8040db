"""ReCode's partial-code prompts: signature + docstring + the first half of the reference body.

The body's non-blank lines are counted and the split falls after floor(n / 2) of them, moved back
to the nearest earlier line that ends a complete statement (never inside brackets or a string).
A one-line body (or one whose first statement spans the whole body) has no such split: its partial
prompt equals the full prompt and the whole reference is the rest. ReCode splits the same way,
line-based; its releases mark the split with `# print('@@this is the line to split##')`.
"""

from __future__ import annotations

import io
import tokenize

from quench.datasets.problem import Problem


def ends_complete_statement(code: str) -> bool:
    """True when `code` tokenizes to the end without an open bracket or string."""
    try:
        for _ in tokenize.generate_tokens(io.StringIO(code).readline):
            pass
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return False
    return True


def split_body(body: str) -> tuple[str, str]:
    """Split a reference body into (first half, rest) at a statement boundary."""
    lines = body.splitlines(keepends=True)
    code_line_ends = [i + 1 for i, line in enumerate(lines) if line.strip()]
    for keep in range(len(code_line_ends) // 2, 0, -1):
        cut = code_line_ends[keep - 1]
        head = "".join(lines[:cut])
        if ends_complete_statement(head):
            return head, "".join(lines[cut:])
    return "", body


def partial_problem(problem: Problem) -> Problem:
    """The partial-code variant of a full-prompt problem (ReCode's code-syntax/format baseline)."""
    if problem.prompt_kind == "partial":
        return problem
    head, rest = split_body(problem.canonical_solution)
    return problem.with_changes(prompt=problem.prompt + head, canonical_solution=rest, prompt_kind="partial")
