"""How ReCode turns a transformed program back into text (profile "recode").

ReCode's code-syntax pipeline (NatGen on tree-sitter tokens) drops the docstring, re-joins every
logical line from its tokens (comments kept on lines of their own, every backslash removed), indents with tabs, puts the docstring back with its
indentation turned into tabs, formats the result with black and cuts the prompt at the split
marker: the marker line's indentation, less one space, ends the prompt and the hidden rest starts
with the marker comment. `render` reproduces those steps on a program already transformed.
"""

from __future__ import annotations

import io
import tokenize

from quench.datasets.partial import docstring_quote
from quench.perturbations.base import CannotApply
from quench.perturbations.marker import MARKER


def sep(code: str, entry_point: str) -> tuple[str, str, str]:
    """ReCode's (header, docstring, body): header through the entry point's line, then the docstring."""
    quote = docstring_quote(code)
    header_end = code.find("\n", code.find(entry_point))
    doc_begin = code.find(quote, header_end)
    doc_end = code.find(quote + "\n", doc_begin + 3)
    if doc_begin == -1 or doc_end == -1:
        return code[:header_end + 1], "", code[header_end + 1:]
    return code[:header_end + 1], code[header_end + 1:doc_end + 4], code[doc_end + 4:]


def leading(line: str) -> str:
    return line[:len(line) - len(line.lstrip(" \t"))]


def tabbed_docstring(doc: str, unit: str) -> str:
    """Each indentation unit in the docstring lines' leading whitespace becomes a tab."""
    if unit == "\t":
        return doc
    lines = []
    for line in doc.split("\n"):
        ahead = leading(line)
        if unit and unit in ahead:
            line = ahead.replace(unit, "\t") + line[len(ahead):]
        lines.append(line)
    return "\n".join(lines)


COMPOUND = frozenset("if elif else for while try except finally with class".split())


def split_statements(code: str) -> str | None:
    """Each `;`-separated statement on a line of its own (`a = 0; b = n` -> two lines at the
    line's indentation; `while x: a; b` -> a block of two lines one level deeper). None where the
    program does not tokenize. Semicolons in strings stay."""
    cuts: list[tuple[tuple[int, int], int, str]] = []  # (row, column), characters cut, text put there
    first = colon = None  # the logical line's first token, and its compound header's colon
    depth = 0
    try:
        for token in tokenize.generate_tokens(io.StringIO(code).readline):
            if token.type in (tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.COMMENT):
                if token.type == tokenize.NEWLINE:
                    first = colon = None
                continue
            if first is None:
                first = token
            if token.type != tokenize.OP:
                continue
            depth += token.string in "([{"
            depth -= token.string in ")]}"
            if token.string == ":" and depth == 0 and colon is None and first.string in COMPOUND:
                colon = token
            elif token.string == ";":
                indent = leading(first.line)
                if colon is not None:
                    indent += "\t" if indent.startswith("\t") else "    "
                    if not cuts or cuts[-1][0] != colon.end:
                        cuts.append((colon.end, 0, "\n" + indent))
                cuts.append((token.start, 1, "\n" + indent))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    lines = code.split("\n")
    for (row, column), width, text in reversed(cuts):
        line = lines[row - 1]
        rest = line[column + width:].strip(" \t")
        comment = rest.startswith("#")  # `a; # why` keeps its comment on the line
        lines[row - 1] = line[:column].rstrip(" \t") + ("  " + rest if comment else text + rest if rest else "")
    return "\n".join(lines)


def token_lines(code: str) -> list[str] | None:
    """One line per logical line and per comment, tokens joined by spaces, tabs for depth."""
    lines: list[str] = []
    parts: list[str] = []
    widths = [0]  # indentation width of each open block

    def flush() -> None:
        if parts:
            lines.append("\t" * (len(widths) - 1) + " ".join(parts))
            parts.clear()

    try:
        for token in tokenize.generate_tokens(io.StringIO(code).readline):
            if token.type == tokenize.INDENT:
                widths.append(len(token.string.expandtabs(8)))
            elif token.type == tokenize.DEDENT:
                widths.pop()
            elif token.type == tokenize.NEWLINE:
                flush()
            elif token.type == tokenize.COMMENT:
                # A comment line before a dedent belongs to the block its column opens.
                column = len(token.line[:token.start[1]].expandtabs(8))
                depth = len(widths) - 1 if parts else max(i for i, width in enumerate(widths) if width <= column)
                flush()
                lines.append("\t" * depth + token.string)
            elif token.type not in (tokenize.NL, tokenize.ENDMARKER):
                parts.append(token.string)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    flush()
    return lines


def black_format(code: str) -> str | None:
    """black with its defaults; None where black cannot parse it (ReCode then wrote the raw
    tokens, `def f ( n ) :`, which quench refuses to pass off as a perturbed prompt)."""
    import black

    try:
        return black.format_str(code, mode=black.Mode())
    except Exception:  # black raises several unrelated types for code it cannot format
        return None


def cut_at_marker(text: str) -> tuple[str, str] | None:
    at = text.find(MARKER)
    if at < 0:
        return None
    start = text.rfind("\n", 0, at) + 1
    indent = text[start:at]
    return text[:start] + indent[:-1] + "\n", text[at:]


def render(code: str, doc: str, entry_point: str, unit: str) -> tuple[str, str]:
    """(prompt, rest) of a transformed docstring-less program `code` as ReCode writes them.
    Raises `CannotApply` where a step fails (ReCode then kept the nominal prompt or raw tokens)."""
    lines = token_lines(code)
    if lines is None:
        raise CannotApply("the transformed program does not tokenize")
    joined = "\n".join(lines).replace("\\", "")
    header, _, body = sep(joined + "\n", entry_point)
    formatted = black_format(header + tabbed_docstring(doc, unit) + body)
    if formatted is None:
        raise CannotApply("black cannot format the transformed program")
    cut = cut_at_marker(formatted)
    if cut is None:
        raise CannotApply("the split marker is lost")
    return cut
