"""Turn model text into the program to run, for MBXP's brace languages (JavaScript, Go, C++, Java).

Raw completions continue the prompt, which ends inside the entry point's body: the completion is
cut right after the brace that closes every block the prompt left open (the method and its class
in Java), so test code, a `main` or another function the model wrote after it never runs.
Chat answers: the fenced block in the problem's language (the one that defines the entry point,
else the first) gives the entry point's whole definition plus the helpers written before it; it
is placed after the prompt's preamble (package, imports, includes, the doc comment), with the
block's own package/import/include lines dropped where the preamble already has them (Go: the
imports the prompt lacks, one declaration each). In Java the method goes back into the prompt's
class; helper methods are not carried over. An answer with no definition of the entry point
is taken as a continuation of the prompt.
"""

from __future__ import annotations

import re
from typing import Iterator

from quench.datasets.languages import LANGUAGES
from quench.datasets.problem import Problem
from quench.execution.sanitized import FENCE, Sanitized, fenced_blocks

PREAMBLE_LINE = re.compile(r"^\s*(package\s|import\s|#include|using\s+namespace\s)")


def code_braces(text: str) -> Iterator[tuple[int, int]]:
    """(offset, +1 or -1) of each `{` and `}` outside comments, strings and character literals."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
            continue
        elif c in "\"'`":
            i = string_end(text, i)
            continue
        elif c == "{":
            yield i, 1
        elif c == "}":
            yield i, -1
        i += 1


def string_end(text: str, start: int) -> int:
    """The offset after the string or character literal that opens at `start` (end of text if open)."""
    quote, i = text[start], start + 1
    while i < len(text):
        if text[i] == "\\" and quote != "`":
            i += 2
            continue
        if text[i] == quote:
            return i + 1
        if text[i] == "\n" and quote != "`":  # an unterminated literal ends with its line
            return i
        i += 1
    return len(text)


def open_depth(text: str) -> int:
    return sum(step for _, step in code_braces(text))


def cut_after_close(text: str, depth: int) -> str | None:
    """`text` up to the brace that brings `depth` open blocks to zero, or None if none does."""
    for offset, step in code_braces(text):
        depth += step
        if depth <= 0:
            return text[: offset + 1]
    return None


def sanitize_braced_completion(problem: Problem, text: str) -> Sanitized:
    """A raw continuation of the prompt, cut where the prompt's open blocks close."""
    depth = open_depth(problem.prompt)
    cut = cut_after_close(text, depth) if depth > 0 else None
    completion = text if cut is None else cut
    return Sanitized(completion=completion.rstrip() + "\n", solution="")


def choose_braced_block(text: str, language: str, entry_point: str) -> str | None:
    """The fenced block (in `language` or untagged) that defines `entry_point`, else the first such block."""
    tags = set(LANGUAGES[language].fences) | {""}
    blocks = [body for tag, body in FENCE.findall(text) if tag.lower() in tags] or fenced_blocks(text)
    for block in blocks:
        if definition_start(block, entry_point) is not None:
            return block
    return blocks[0] if blocks else None


def definition_start(code: str, entry_point: str) -> int | None:
    """Offset of the line that defines `entry_point` (its name, `(`, and later `{`), or None."""
    # Not a comment line (a doc example calls the function), not a statement (`=`, `;`).
    name = re.escape(entry_point)
    pattern = re.compile(rf"^[ \t]*+(?![*/])[^\n;=]*?\b{name}\s*\([^;]*?\)[^;{{]*\{{", re.MULTILINE | re.DOTALL)
    match = pattern.search(code)
    return None if match is None else match.start()


def prompt_preamble_braced(problem: Problem) -> str:
    """The prompt before the line that defines the entry point."""
    start = definition_start(problem.prompt, problem.entry_point)
    if start is None:
        return problem.prompt
    line_start = problem.prompt.rfind("\n", 0, start) + 1
    return problem.prompt[:line_start]


def without_duplicate_preamble(code: str, preamble: str) -> str:
    """Drop package/import/include lines that the prompt's preamble already has, and a Java class line."""
    have = {line.strip() for line in preamble.splitlines()}
    kept = [line for line in code.splitlines(keepends=True)
            if not (PREAMBLE_LINE.match(line) and (line.strip() in have or line.lstrip().startswith("package ")))]
    return "".join(kept)


GO_IMPORT = re.compile(r'^import\s*(?:\((?P<group>[^)]*)\)|(?P<one>(?:[\w.]+\s+)?"[^"]+"))[ \t]*\n?', re.MULTILINE)
GO_IMPORT_SPEC = re.compile(r'^\s*((?:[\w.]+\s+)?"([^"]+)")', re.MULTILINE)


def go_import_specs(code: str) -> list[tuple[str, str]]:
    """(spec, path) of each package a Go file imports, e.g. ('"strings"', "strings")."""
    specs: list[tuple[str, str]] = []
    for match in GO_IMPORT.finditer(code):
        specs += [(m[1], m[2]) for m in GO_IMPORT_SPEC.finditer(match["group"] or match["one"])]
    return specs


def go_helpers(code: str, preamble: str) -> str:
    """The answer's code before the function: its imports that the prompt lacks, one per line, then the rest."""
    known = {path for _, path in go_import_specs(preamble)}
    new = [f"import {spec}\n" for spec, path in go_import_specs(code) if path not in known]
    rest = GO_IMPORT.sub("", re.sub(r"^package\s+\w+[ \t]*\n?", "", code, flags=re.MULTILINE))
    return "".join(new) + "\n" + rest.lstrip("\n") if new else rest.lstrip("\n")


def sanitize_braced_chat(problem: Problem, text: str) -> Sanitized:
    block = choose_braced_block(text, problem.language, problem.entry_point)
    start = definition_start(block, problem.entry_point) if block is not None else None
    if block is None or start is None:
        return sanitize_braced_completion(problem, block if block is not None else text)
    function = cut_after_close(block[start:], 0)
    if function is None:  # cut short by the token budget: the function never closes
        function = block[start:]
    preamble = prompt_preamble_braced(problem)
    if problem.language == "java":
        helpers = ""
    elif problem.language == "go":
        helpers = go_helpers(block[:start], preamble)
    else:
        helpers = without_duplicate_preamble(block[:start], preamble)
    code = helpers + function.strip("\n") + "\n"
    closing = "}\n" * max(open_depth(preamble), 0)  # Java: close the prompt's class after the method
    return Sanitized(completion=code, solution=preamble + code + closing)
