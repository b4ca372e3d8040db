"""The editable docstring text of a prompt, cut into pieces that may or may not be edited.

ReCode edits the docstring from after the opening quotes to the first `>>>`. We do the same and
additionally protect every identifier of the program (with or without `_`), quoted text, code-like
tokens (`cost[][]`, `x**2`, `O(n)`), numbers, escapes and example lines (`f(x) == y`, `a -> b`).
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass

from quench.datasets import Problem
from quench.perturbations.source import Source, docstring_node, find_function, parse

WORD, SPACE, FIXED = "word", "space", "fixed"
EXAMPLE_LINE = re.compile(r"==|!=|->|=>|>>>|<=|>=|^\s*[A-Za-z_][\w.]*\(")
# A double-quoted string may run over a line break (an expected output quoted in the prose); a single
# quote may not, as an apostrophe (`file's`) would open one.
QUOTED = re.compile(r"(?<![A-Za-z])'[^'\n]*'(?![A-Za-z])|\"[^\"]*\"|`[^`\n]*`")
ESCAPE = re.compile(r"\\.", re.DOTALL)
TOKEN = re.compile(r"(\n[ \t]*)|([ \t]+)|(\S+)")
WORD_CHARS = re.compile(r"[A-Za-z]+(?:['-][A-Za-z]+)*")
EDGE_PUNCT = ".,;:!?()\"'"


@dataclass(frozen=True)
class Piece:
    text: str
    kind: str  # WORD (editable word), SPACE (spaces inside a line), FIXED (everything else)


@dataclass(frozen=True)
class DocText:
    """The editable span `prompt[start:end]` of the entry point's docstring."""

    start: int
    end: int
    identifiers: frozenset[str]


def program_identifiers(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.alias):
            names.update((node.asname or node.name).split("."))
        elif isinstance(node, ast.keyword) and node.arg:
            names.add(node.arg)
    return names


PYTHON_WORDS = frozenset({"True", "False", "None", "int", "str", "float", "bool", "list", "dict", "tuple", "set"})


def docstring_text(problem: Problem) -> DocText | None:
    """Where the entry point's docstring prose lies in the prompt, or None without a docstring."""
    return find_docstring_text(problem.prompt, problem.canonical_solution, problem.entry_point)


@functools.lru_cache(maxsize=4096)
def find_docstring_text(prompt: str, solution: str, entry_point: str) -> DocText | None:
    problem = Problem("", prompt, solution, "", entry_point)
    tree = parse(problem.prompt + problem.canonical_solution) or parse(problem.prompt)
    if tree is None:
        return None
    function = find_function(tree, problem.entry_point)
    doc = docstring_node(function) if function else None
    if doc is None:
        return None
    source = Source(problem.prompt)
    if doc.end_lineno is None or doc.end_lineno > len(source.line_starts):
        return None
    start, end = source.span(doc)
    literal = problem.prompt[start:end]
    body_start = len(literal) - len(literal.lstrip("rRuU"))
    quote = literal[body_start:body_start + 3] if literal[body_start:body_start + 3] in ('"""', "'''") else literal[body_start]
    content_start, content_end = start + body_start + len(quote), end - len(quote)
    examples = problem.prompt.find(">>>", content_start, content_end)
    if examples >= 0:
        content_end = examples
    text = problem.prompt[content_start:content_end]
    lead = len(text) - len(text.lstrip())
    trail = len(text.rstrip())
    if trail <= lead:
        return None
    identifiers = program_identifiers(tree) | PYTHON_WORDS
    return DocText(content_start + lead, content_start + trail, frozenset(identifiers))


def protected_ranges(text: str) -> list[tuple[int, int]]:
    ranges = [m.span() for m in QUOTED.finditer(text)] + [m.span() for m in ESCAPE.finditer(text)]
    offset = 0
    for line in text.splitlines(keepends=True):
        if EXAMPLE_LINE.search(line):
            ranges.append((offset, offset + len(line)))
        offset += len(line)
    return ranges


def is_protected_word(word: str, identifiers: frozenset[str]) -> bool:
    """Identifiers of the program, names with `_` or digits, camelCase and ALLCAPS stay as they are."""
    if word in identifiers or "_" in word or any(c.isdigit() for c in word):
        return True
    return any(a.islower() and b.isupper() for a, b in zip(word, word[1:])) or (len(word) > 1 and word.isupper())


def split_token(token: str, identifiers: frozenset[str]) -> list[Piece]:
    """`(numbers,` -> `(` fixed, `numbers` word, `,` fixed; code-like tokens stay whole."""
    core = token.strip(EDGE_PUNCT)
    if not core:
        return [Piece(token, FIXED)]
    left = token.index(core)
    right = left + len(core)
    if not WORD_CHARS.fullmatch(core) or is_protected_word(core, identifiers):
        return [Piece(token, FIXED)]
    pieces = [Piece(token[:left], FIXED), Piece(core, WORD), Piece(token[right:], FIXED)]
    return [p for p in pieces if p.text]


@functools.lru_cache(maxsize=4096)
def segment(text: str, identifiers: frozenset[str]) -> list[Piece]:
    """Cut the editable docstring text into words, in-line spaces and fixed pieces."""
    protected = protected_ranges(text)
    pieces: list[Piece] = []
    for match in TOKEN.finditer(text):
        start, end = match.span()
        if any(a < end and start < b for a, b in protected) or match.group(1):
            pieces.append(Piece(match.group(), FIXED))
        elif match.group(2):
            pieces.append(Piece(match.group(), SPACE))
        else:
            pieces.extend(split_token(match.group(), identifiers))
    return pieces


def join(pieces: list[Piece]) -> str:
    return "".join(p.text for p in pieces)


def match_case(original: str, replacement: str) -> str:
    if original.isupper() and len(original) > 1:
        return replacement.upper()
    if original[:1].isupper():
        return replacement[:1].upper() + replacement[1:]
    return replacement
