"""Partial-code prompts: signature + docstring + the first half of the reference body.

Two splits, one per perturbation profile (`quench.perturbations.profile`):

- `split_body` (profile "quench"): the body's non-blank lines are counted and the split falls
  after floor(n / 2) of them, moved back to the nearest earlier line that ends a complete
  statement (never inside brackets or a string).
- `recode_cut` (profile "recode"): ReCode's own split, which counts every line of the body after
  the docstring, blank ones included, and cuts after floor(n / 2) of them wherever that falls.
  Its prompts equal ReCode's released `nominal/*_partial.jsonl` byte for byte.

Either way a one-line body has no split: the partial prompt equals the full prompt and the
whole reference is the rest. ReCode's releases mark the split with
`# print('@@this is the line to split##')`.

MBXP's languages (JavaScript, Go, C++, Java) split like profile "quench", with a statement
boundary that suits braces: a line ending in `;`, `{` or `}`. A problem without a reference
body (every Go problem, some others) has no split either: its partial prompt is the full prompt.
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


def ends_braced_statement(line: str) -> bool:
    """A line of a brace language that ends a statement or opens/closes a block."""
    code = line.split("//")[0].rstrip()
    return code.endswith((";", "{", "}"))


def split_braced_body(body: str) -> tuple[str, str]:
    """`split_body` for brace languages: after about half the non-blank lines, at a statement end."""
    lines = body.splitlines(keepends=True)
    code_line_ends = [i + 1 for i, line in enumerate(lines) if line.strip()]
    for keep in range(len(code_line_ends) // 2, 0, -1):
        cut = code_line_ends[keep - 1]
        if ends_braced_statement(lines[cut - 1]):
            return "".join(lines[:cut]), "".join(lines[cut:])
    return "", body


def docstring_quote(code: str) -> str:
    """ReCode's docstring delimiter: `\"\"\"` unless the program only uses `'''`."""
    return "'''" if '"""' not in code and "'''" in code else '"""'


def body_start(code: str, entry_point: str) -> int:
    """Where ReCode's body begins: after the docstring that follows the entry point's header line.

    The header is everything up to the end of the first line that mentions `entry_point`; the
    docstring runs from the next delimiter to the first delimiter followed by a newline.
    """
    quote = docstring_quote(code)
    header_end = code.find("\n", code.find(entry_point))
    doc_begin = code.find(quote, header_end)
    doc_end = code.find(quote + "\n", doc_begin + 3)
    if doc_begin != -1 and doc_end != -1:
        return doc_end + 4
    return header_end + 1


def count_recode_lines(body: str) -> int:
    """ReCode's line count: newlines after the first character (a final newline is implied)."""
    if not body.endswith("\n"):
        body += "\n"
    return body.count("\n", 1)


def recode_cut(code: str, entry_point: str) -> int | None:
    """Offset in the whole program where ReCode's partial prompt ends; None for a one-line body."""
    start = body_start(code, entry_point)
    body = code[start:]
    if not body:
        return None
    lines = count_recode_lines(body)
    if lines <= 1:
        return None
    index = -1
    for _ in range(lines // 2):
        index = body.find("\n", index + 1)
    return start + index + 1


def recode_partial_problem(problem: Problem) -> Problem:
    """ReCode's partial-code variant of a full-prompt problem (profile "recode")."""
    if problem.prompt_kind == "partial":
        return problem
    whole = problem.prompt + problem.canonical_solution
    cut = recode_cut(whole, problem.entry_point)
    if cut is None:
        return problem.with_changes(prompt_kind="partial")
    return problem.with_changes(prompt=whole[:cut], canonical_solution=whole[cut:], prompt_kind="partial")


def partial_problem(problem: Problem) -> Problem:
    """The partial-code variant of a full-prompt problem (profile "quench": statement boundary)."""
    if problem.prompt_kind == "partial":
        return problem
    split = split_body if problem.language == "python" else split_braced_body
    head, rest = split(problem.canonical_solution)
    return problem.with_changes(prompt=problem.prompt + head, canonical_solution=rest, prompt_kind="partial")
