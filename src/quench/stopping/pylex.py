"""Just enough of Python's lexer to know, line by line, where logical lines start.

The function-complete rule reads indentation only at the start of a logical line: not inside a
multi-line string, not inside brackets, not after a backslash continuation. `LexState` carries
exactly that across physical lines, so the rule can run on text as it streams in.
"""

from __future__ import annotations

from dataclasses import dataclass

OPENERS = "([{"
CLOSERS = ")]}"


@dataclass
class LexState:
    """What one physical line leaves open for the next."""

    string: str | None = None  # the open string's quote: '"""', "'''", or '"'/"'" continued by a backslash
    depth: int = 0  # open brackets
    continued: bool = False  # the line ended with a backslash outside strings
    last_code: str = ""  # the last significant character outside strings and comments

    @property
    def at_logical_start(self) -> bool:
        return self.string is None and self.depth == 0 and not self.continued


def lex_line(line: str, state: LexState) -> None:
    """Advance `state` over one physical line (without its newline)."""
    i, n = 0, len(line)
    state.continued = False
    while i < n:
        if state.string is not None:
            i = _scan_string(line, i, state)
            continue
        c = line[i]
        if c == "#":
            return
        if c in "\"'":
            quote = line[i : i + 3] if line[i : i + 3] in ('"""', "'''") else c
            state.string = quote
            state.last_code = c
            i += len(quote)
            continue
        if c == "\\" and i == n - 1:
            state.continued = True
            return
        if c in OPENERS:
            state.depth += 1
        elif c in CLOSERS:
            state.depth = max(0, state.depth - 1)  # unbalanced code must not wedge the scanner
        if not c.isspace():
            state.last_code = c
        i += 1
    if state.string is not None and len(state.string) == 1 and not state.continued:
        state.string = None  # an unterminated one-line string ends with its line (a syntax error anyway)


def _scan_string(line: str, i: int, state: LexState) -> int:
    """Skip string contents from `i`; close the string at its quote. Returns the new index."""
    quote = state.string
    assert quote is not None
    n = len(line)
    while i < n:
        if line[i] == "\\":
            if i == n - 1:
                state.continued = True  # a backslash-newline inside a string continues it
            i += 2
            continue
        if line.startswith(quote, i):
            state.string = None
            return i + len(quote)
        i += 1
    return n


def indent_width(line: str) -> int:
    """Columns of leading whitespace, tabs to the next multiple of 8 (as Python's tokenizer)."""
    width = 0
    for c in line:
        if c == " ":
            width += 1
        elif c == "\t":
            width = (width // 8 + 1) * 8
        elif c == "\f":
            width = 0
        else:
            break
    return width
