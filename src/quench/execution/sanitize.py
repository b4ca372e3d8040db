"""Turn model text into the code to run: a completion of the prompt or a whole solution
(execution/program_build.py puts it together with the problem's tests).

Chat answers: the code fence (the one that defines the entry point, else the first), with prose,
trailing test code (`print`, `assert`, calls, `if __name__` blocks) and unfinished trailing lines
removed; it becomes a whole `solution` placed after the prompt's preamble (imports, helpers).
Raw completions: the continuation of the prompt, cut where a top-level statement starts and
trimmed back until `prompt + completion` parses. MBXP's other languages: see sanitize_braces.py.
"""

from __future__ import annotations

import ast
import re

from quench.datasets.problem import Problem
from quench.execution.sanitize_braces import sanitize_braced_chat, sanitize_braced_completion
from quench.execution.sanitized import FENCE, Sanitized, fenced_blocks

KEPT_TOP_LEVEL = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)


def defines(code: str, name: str) -> bool:
    return re.search(rf"^\s*(async\s+)?def\s+{re.escape(name)}\s*\(", code, re.MULTILINE) is not None


def choose_block(text: str, entry_point: str) -> str:
    """The fenced block that defines the entry point, else the first block, else the whole text."""
    blocks = fenced_blocks(text)
    for block in blocks:
        if defines(block, entry_point):
            return block
    return blocks[0] if blocks else text


def longest_parsable_prefix(code: str, prefix: str = "") -> str:
    """Drop trailing lines until `prefix + code` parses (an answer cut by the token budget)."""
    lines = code.splitlines(keepends=True)
    for end in range(len(lines), -1, -1):
        candidate = "".join(lines[:end])
        try:
            ast.parse(prefix + candidate)
        except SyntaxError:
            continue
        return candidate
    return ""


def is_main_guard(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and "__name__" in ast.unparse(node.test)


def drop_test_code(code: str) -> str:
    """Keep imports, definitions and assignments at top level; drop prints, asserts, calls, main guards."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code
    lines = code.splitlines(keepends=True)
    keep: list[str] = []
    for node in tree.body:
        if isinstance(node, KEPT_TOP_LEVEL) and not is_main_guard(node):
            start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            keep.append("".join(lines[start - 1 : node.end_lineno]))
    return "\n".join(part.rstrip("\n") + "\n" for part in keep)


def prompt_preamble(problem: Problem) -> str:
    """The prompt before the entry point's `def` line: imports and helper functions."""
    match = re.search(rf"^(async\s+)?def\s+{re.escape(problem.entry_point)}\s*\(", problem.prompt, re.MULTILINE)
    return problem.prompt[: match.start()] if match else ""


def sanitize_chat(problem: Problem, text: str) -> Sanitized:
    block = choose_block(text, problem.entry_point)
    code = drop_test_code(longest_parsable_prefix(block))
    if defines(code, problem.entry_point):
        return Sanitized(completion=code, solution=prompt_preamble(problem) + code)
    # An answer with the body only: treat it as a continuation of the prompt.
    return sanitize_completion(problem, block)


def cut_at_top_level(completion: str) -> str:
    """Cut a raw continuation where a non-indented statement begins (the function has ended)."""
    out: list[str] = []
    for line in completion.splitlines(keepends=True):
        if line.strip() and not line[0].isspace() and not line.lstrip().startswith("#"):
            break
        out.append(line)
    return "".join(out)


def sanitize_completion(problem: Problem, text: str) -> Sanitized:
    if problem.prompt.endswith("\n") or not text:
        text = cut_at_top_level(text)
    return Sanitized(completion=longest_parsable_prefix(text, problem.prompt).rstrip() + "\n", solution="")


def sanitize(problem: Problem, text: str, prompt_format: str) -> Sanitized:
    """Model text → what to execute; `prompt_format` is "chat" or "completion"."""
    if problem.language != "python":  # MBXP's brace languages
        return sanitize_braced_chat(problem, text) if prompt_format == "chat" else sanitize_braced_completion(problem, text)
    if prompt_format == "chat":
        return sanitize_chat(problem, text)
    return sanitize_completion(problem, text)

