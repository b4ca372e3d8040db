"""Source positions and text edits: perturb a program by splicing text, never by re-printing it.

Code-level perturbations work on a `PartialProgram` (the visible partial prompt plus the hidden
rest of the reference) so that the rest can be edited consistently (a renamed variable, a
re-indented line) while everything that is not edited stays byte-for-byte.
"""

from __future__ import annotations

import ast
import bisect
import functools
import re
import warnings
from dataclasses import dataclass
from typing import Iterator

from quench.datasets import Problem, partial_problem


class Source:
    """Text with ast-compatible (line, byte column) -> character offset conversion."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.ascii = text.isascii()

    def offset(self, lineno: int, col_bytes: int) -> int:
        start = self.line_starts[lineno - 1]
        if self.ascii:
            return start + col_bytes
        line = self.text[start:self.line_end(start)]
        return start + len(line.encode("utf-8")[:col_bytes].decode("utf-8", "replace"))

    def line_end(self, offset: int) -> int:
        """Offset of the newline ending the line that holds `offset` (or len(text))."""
        end = self.text.find("\n", offset)
        return len(self.text) if end < 0 else end

    def line_start(self, offset: int) -> int:
        return self.line_starts[bisect.bisect_right(self.line_starts, offset) - 1]

    def span(self, node: ast.AST) -> tuple[int, int]:
        start = self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = self.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        return start, end

    def starts_line(self, offset: int) -> bool:
        """True when only indentation precedes `offset` on its line."""
        return not self.text[self.line_start(offset):offset].strip()

    def indent_at(self, offset: int) -> str:
        start = self.line_start(offset)
        line = self.text[start:self.line_end(start)]
        return line[:len(line) - len(line.lstrip(" \t"))]


@dataclass(frozen=True)
class Edit:
    start: int
    end: int
    text: str


@dataclass(frozen=True)
class PartialProgram:
    """`prompt` (visible) + `rest` (hidden reference continuation) = the whole program."""

    prompt: str
    rest: str

    @property
    def text(self) -> str:
        return self.prompt + self.rest

    @property
    def split(self) -> int:
        return len(self.prompt)

    def edited(self, edits: list[Edit]) -> "PartialProgram":
        """Apply non-overlapping edits; an insertion exactly at the split stays visible."""
        text, split = self.text, self.split
        for edit in sorted(edits, key=lambda e: (e.start, e.end), reverse=True):
            if edit.start < split < edit.end:
                raise ValueError("an edit may not straddle the prompt/rest split")
            text = text[:edit.start] + edit.text + text[edit.end:]
            if edit.start <= split and edit.end <= split:
                split += len(edit.text) - (edit.end - edit.start)
        return PartialProgram(text[:split], text[split:])


@functools.lru_cache(maxsize=4096)
def cached_partial(problem: Problem) -> Problem:
    """`partial_problem`, computed once per problem (it tokenizes the body)."""
    return partial_problem(problem)


def as_partial(problem: Problem) -> tuple[Problem, PartialProgram]:
    partial = cached_partial(problem)
    return partial, PartialProgram(partial.prompt, partial.canonical_solution)


def with_program(partial: Problem, program: PartialProgram) -> Problem:
    if program.prompt == partial.prompt and program.rest == partial.canonical_solution:
        return partial
    return partial.with_changes(prompt=program.prompt, canonical_solution=program.rest)


@functools.lru_cache(maxsize=4096)
def parse(text: str) -> ast.Module | None:
    """Parsed module, shared by the transformations (ast trees are only read, never changed)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes in benchmark code are not our business
            return ast.parse(text)
    except (SyntaxError, ValueError):
        return None


def find_function(tree: ast.Module, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
    return None


def docstring_node(function: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.Constant | None:
    first = function.body[0] if function.body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return first.value
    return None


def own_nodes(function: ast.AST) -> Iterator[ast.AST]:
    """Nodes of a function's own scope: not inside nested functions, lambdas or classes."""
    stack = list(ast.iter_child_nodes(function))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))


def own_statements(function: ast.AST) -> list[ast.stmt]:
    """Statements of the function's own scope in source order (docstring excluded)."""
    stmts = [n for n in own_nodes(function) if isinstance(n, ast.stmt)]
    stmts.sort(key=lambda n: (n.lineno, n.col_offset))
    doc = docstring_node(function)  # type: ignore[arg-type]
    return [s for s in stmts if not (isinstance(s, ast.Expr) and s.value is doc)]


def body_indent_unit(source: Source, function: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """The indentation one level adds (`"    "`, `"\\t"`, `"  "`), read from the function."""
    def_indent = source.indent_at(source.span(function)[0])
    body_indent = source.indent_at(source.span(function.body[0])[0])
    if body_indent.startswith(def_indent) and len(body_indent) > len(def_indent):
        return body_indent[len(def_indent):]
    return "    "
