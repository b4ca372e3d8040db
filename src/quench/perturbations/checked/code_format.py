"""Code-format perturbations (ReCode's format set) on the partial-code prompt.

Edits are line- or token-level and never touch string contents: `split_lines` breaks a line
between two tokens (ReCode's version could put a `\\` before a space), `new_lines` never adds a
line inside a string or after a `\\` continuation, and `tab_indent` re-indents the hidden rest
too so that prompt + rest stays one consistently indented program.
"""

from __future__ import annotations

import ast
import functools
import io
import random
import tokenize

from quench.perturbations.base import CODE_FORMAT
from quench.perturbations.checked.code_syntax import Analysed, CodePerturbation
from quench.perturbations.source import Edit, body_indent_unit, docstring_node


def docstring_nodes(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings (of any function, class or module)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                out.add(id(first.value))
    return out


@functools.lru_cache(maxsize=4096)
def string_spans(a: Analysed, include_docstrings: bool = True) -> list[tuple[int, int]]:
    """Spans of every string literal (cached per analysed program)."""
    docs = docstring_nodes(a.tree)
    return [a.span(n) for n in ast.walk(a.tree)
            if isinstance(n, ast.JoinedStr) or (isinstance(n, ast.Constant) and isinstance(n.value, (str, bytes))
                                                 and (include_docstrings or id(n) not in docs))]


def inside(offset: int, spans: list[tuple[int, int]]) -> bool:
    return any(start < offset < end for start, end in spans)


def docstring_end(a: Analysed) -> int:
    """Where the code after the entry point's docstring (or its header) begins."""
    doc = docstring_node(a.function)
    if doc is not None:
        return a.span(doc)[1]
    return a.source.line_start(a.span(a.function.body[0])[0]) - 1


def statement_depths(text: str) -> dict[int, int] | None:
    """Block depth of every line that starts a logical line (1-based line numbers)."""
    depths: dict[int, int] = {}
    depth, line_start = 0, True
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.INDENT:
                depth += 1
            elif token.type == tokenize.DEDENT:
                depth -= 1
            elif token.type == tokenize.NEWLINE:
                line_start = True
            elif token.type not in (tokenize.NL, tokenize.COMMENT, tokenize.ENDMARKER) and line_start:
                depths[token.start[0]] = depth
                line_start = False
    except (tokenize.TokenError, SyntaxError):
        return None
    return depths


class TabIndent(CodePerturbation):
    """Statement lines are re-indented by block depth, so mixed widths (4 then 6 spaces) stay
    consistent; other lines (docstring, continuation, comments) have each unit replaced."""

    name = "tab_indent"
    category = CODE_FORMAT
    description = "indentation converted between spaces and tabs (prompt and hidden rest alike)"
    randomized = False

    def edits(self, a: Analysed, rng: random.Random) -> list[Edit]:
        unit = body_indent_unit(a.source, a.function)
        old, new = ("\t", "    ") if "\t" in unit else (unit, "\t")
        depths = statement_depths(a.source.text)
        if depths is None:
            return []
        strings = string_spans(a, include_docstrings=False)
        edits = []
        for number, start in enumerate(a.source.line_starts, start=1):
            line = a.source.text[start:a.source.line_end(start)]
            indent = line[:len(line) - len(line.lstrip(" \t"))]
            if not line.strip() or not indent or inside(start, strings):
                continue
            replaced = new * depths[number] if number in depths else indent.replace(old, new)
            if replaced != indent:
                edits.append(Edit(start, start + len(indent), replaced))
        return edits


def line_breaks(a: Analysed, start: int, end: int) -> list[tuple[int, int]]:
    """Gaps (offsets) between two tokens of one code line where `\\` + newline may go."""
    tokens = tokenize.generate_tokens(io.StringIO(a.source.text).readline)
    line_no = a.source.text.count("\n", 0, start) + 1
    on_line = []
    try:
        for token in tokens:
            if token.start[0] > line_no:
                break
            if token.start[0] == line_no == token.end[0] and token.type not in (
                    tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.COMMENT):
                on_line.append(token)
    except (tokenize.TokenError, SyntaxError):
        return []
    gaps = []
    for left, right in zip(on_line, on_line[1:]):
        if left.end[1] < right.start[1]:
            gaps.append((start + left.end[1], start + right.start[1]))
    return gaps


class SplitLines(CodePerturbation):
    name = "split_lines"
    category = CODE_FORMAT
    description = "the longest visible code line split in the middle with a `\\` continuation"
    randomized = False

    def edits(self, a: Analysed, rng: random.Random) -> list[Edit]:
        first = a.source.line_end(docstring_end(a)) + 1
        strings = string_spans(a)
        best: tuple[int, int, list[tuple[int, int]]] | None = None
        for start in a.source.line_starts:
            end = a.source.line_end(start)
            if start < first or end >= a.program.split or inside(start, strings):
                continue
            length = len(a.source.text[start:end].strip().replace(" ", ""))
            if best is not None and length <= best[0]:
                continue
            gaps = line_breaks(a, start, end)
            if gaps:
                best = (length, start, gaps)
        if best is None:
            return []
        gap = best[2][len(best[2]) // 2]
        indent = a.source.indent_at(best[1]) + body_indent_unit(a.source, a.function)
        return [Edit(gap[0], gap[1], f" \\\n{indent}")]


class Doc2Comments(CodePerturbation):
    name = "doc2comments"
    category = CODE_FORMAT
    description = "the docstring turned into `#` comments"
    randomized = False

    def edits(self, a: Analysed, rng: random.Random) -> list[Edit]:
        doc = docstring_node(a.function)
        if doc is None:
            return []
        start, end = a.span(doc)
        line_end = a.source.line_end(end)
        if not a.source.starts_line(start) or a.source.text[end:line_end].strip():
            return []
        literal = a.source.text[start:end]
        body = literal.lstrip("rRuU")
        quote = body[:3] if body[:3] in ('"""', "'''") else body[:1]
        indent = a.source.indent_at(start)
        lines = body[len(quote):len(body) - len(quote)].split("\n")
        out = []
        for i, line in enumerate(lines):
            text = line[len(indent):] if line.startswith(indent) and i else line.strip()
            if not text.strip():
                if 0 < i < len(lines) - 1:
                    out.append("")
                continue
            out.append(f"{indent}# {text.rstrip()}")
        if not out:
            return []
        return [Edit(a.source.line_start(start), line_end, "\n".join(out))]


@functools.lru_cache(maxsize=4096)
def line_ends(a: Analysed) -> list[int]:
    """Visible newlines after the docstring where a blank line may go (not in strings or after `\\`)."""
    text, strings = a.source.text, string_spans(a)
    out = []
    for offset in range(docstring_end(a), a.program.split):
        if text[offset] == "\n" and not inside(offset, strings) and text[offset - 1] != "\\":
            out.append(offset)
    return out


class NewLines(CodePerturbation):
    blank_lines_only = True
    name = "new_lines"
    category = CODE_FORMAT
    description = "blank lines added after visible code lines with p=0.5"

    def __init__(self, prob: float = 0.5) -> None:
        self.prob = prob

    def edits(self, a: Analysed, rng: random.Random) -> list[Edit]:
        edits = []
        for offset in line_ends(a):
            if rng.random() < self.prob:
                edits.append(Edit(offset + 1, offset + 1, "\n"))
        return edits


class NewLineAfterCode(CodePerturbation):
    blank_lines_only = True
    name = "new_line_aftercode"
    category = CODE_FORMAT
    description = "a blank line added at the end of the prompt"
    randomized = False

    def edits(self, a: Analysed, rng: random.Random) -> list[Edit]:
        return [Edit(a.program.split, a.program.split, "\n")]


class NewLineAfterDoc(CodePerturbation):
    blank_lines_only = True
    name = "new_line_afterdoc"
    category = CODE_FORMAT
    description = "a blank line added right after the docstring"
    randomized = False

    def edits(self, a: Analysed, rng: random.Random) -> list[Edit]:
        doc = docstring_node(a.function)
        if doc is None:
            return []
        end = a.span(doc)[1]
        if a.source.text[end:a.source.line_end(end)].strip():
            return []  # `"""doc"""; x = 1`: no line break there
        return [Edit(end, end, "\n")]
