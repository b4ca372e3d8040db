"""ReCode's code-format transformations (profile "recode"): plain text edits of the partial prompt.

Each function takes the partial prompt and the entry point and returns ReCode's variant, quirks
included: `tab_indent` replaces each leading indentation unit (blank lines and the hidden rest
stay as they are), `split_lines` puts ` \\ ` before word n//2 of the longest line (words split on
single spaces, so it may land inside a string), `doc2comments` keeps whitespace-only docstring
lines as `#  ` comments. Only the prompt changes; the reference rest is kept as is.
"""

from __future__ import annotations

import random

from quench.datasets import Problem
from quench.datasets.partial import docstring_quote, recode_partial_problem
from quench.perturbations.base import CODE_FORMAT, Perturbation

BLANKS = " \t"


def is_blank(line: str) -> bool:
    return not line.replace(" ", "").replace("\t", "").replace("\n", "")


def leading(line: str) -> str:
    """The run of spaces and tabs a line starts with."""
    return line[:len(line) - len(line.lstrip(BLANKS))]


def indent_unit(code: str, entry_point: str) -> str:
    """The whitespace that starts the line after the entry point's header line."""
    header_end = code.find("\n", code.find(entry_point))
    return leading(code[header_end + 1:].split("\n", 1)[0])


def replace_indent(code: str, old: str, new: str) -> str:
    """Each `old` in each non-blank line's leading whitespace becomes `new`."""
    out = []
    for line in code.split("\n"):
        indent = leading(line)
        if not is_blank(line) and old in indent:
            line = indent.replace(old, new) + line[len(indent):]
        out.append(line)
    return "\n".join(out)


def tab_indent(code: str, entry_point: str) -> str:
    unit = indent_unit(code, entry_point)
    if not unit:
        return code
    return replace_indent(code, unit, "    ") if "\t" in unit else replace_indent(code, unit, "\t")


def after_docstring(code: str, entry_point: str) -> int:
    """End of the first docstring after the entry point (ReCode's `doc_end`)."""
    quote = docstring_quote(code)
    start = code.find(quote, code.find(entry_point))
    return code.find(quote, start + 3) + 3


def trim_line(line: str) -> tuple[str, str, str]:
    """(indent, text, trailing spaces) of a non-blank line as ReCode cuts it.

    ReCode scans trailing spaces from the end but never looks at the first character, and keeps
    its scan index when the text is one character long; both quirks are kept.
    """
    first = next(i for i, ch in enumerate(line) if ch not in BLANKS)
    indent, text = line[:first], line[first:]
    stop, post = first, ""
    for stop in range(1, len(text)):
        ch = text[len(text) - stop]
        if ch not in " \n":
            break
        post = ch + post
    return indent, text[:len(text) - stop + 1], post


PLACEHOLDER = "@!string!@"


def protect_strings(text: str) -> tuple[str, list[str]]:
    """`"..."` runs replaced by a placeholder; ReCode slices each one from the unmodified text."""
    masked, strings = text, []
    start = masked.find('"')
    while start != -1:
        end = masked.find('"', start + 1)
        if end == -1:
            raise ValueError("unbalanced double quote")
        strings.append(text[start:end + 1])
        masked = masked[:start] + PLACEHOLDER + masked[end + 1:]
        start = masked.find('"')
    return masked, strings


def restore_strings(text: str, strings: list[str]) -> str:
    # ReCode drops the character after each placeholder when it puts the string back.
    start = text.find(PLACEHOLDER)
    while start != -1:
        text = text[:start] + strings.pop(0) + text[start + len(PLACEHOLDER) + 1:]
        start = text.find(PLACEHOLDER)
    return text


def split_line(line: str) -> str:
    """` \\` + newline inserted before the middle word (words split on single spaces)."""
    indent, text, post = trim_line(line)
    masked, strings = protect_strings(text) if '"' in text else (text, [])
    words = masked.split(" ")
    if len(words) >= 2:
        words.insert(len(words) // 2, " \\\n ")
        masked = indent + " ".join(words) + post
    return restore_strings(masked, strings)


def split_candidates(lines: list[str], entry_point: str) -> list[int]:
    """Lines ReCode may split: not blank, not a comment, not the header, outside `\"\"\"` blocks.

    A line holding triple quotes toggles the block state, so a one-line docstring opens a block
    that the next docstring closes (ReCode then splits a docstring line: HumanEval/10).
    """
    out, in_block = [], False
    for number, line in enumerate(lines):
        if is_blank(line):
            continue
        if "'''" in line or '"""' in line:
            in_block = not in_block
            continue
        if "#" in line or in_block or entry_point in line:
            continue
        out.append(number)
    return out


def split_lines(code: str, entry_point: str) -> str:
    """The longest candidate line (spaces and tabs not counted) split before its middle word."""
    lines = code.split("\n")
    candidates = split_candidates(lines, entry_point)
    longest, longest_length = 0, -1
    for number in candidates:
        _, text, _ = trim_line(lines[number])
        length = len(text.replace(" ", "").replace("\t", ""))
        if len(text.split(" ")) >= 2 and length > longest_length:
            longest, longest_length = number, length
    if longest not in candidates:
        return code
    try:
        lines[longest] = split_line(lines[longest])
    except ValueError:
        return code  # ReCode stops with an assertion on such a line
    return "\n".join(lines)


def comment_line(line: str, quote: str, indent: str) -> str:
    if '"""' in line:
        line = line.replace(f"{quote} ", "").replace(quote, "")
    ahead = leading(line)
    if indent not in ahead:
        return line
    # ReCode's scan stops on the last character of a whitespace-only line and keeps it: `#  `.
    text = line[len(ahead):] if ahead != line else line[len(line) - 1:]
    return ahead[:len(indent)] + "# " + ahead[len(indent):] + text


def doc2comments(code: str, entry_point: str) -> str:
    """Docstring lines become `# ` comments at the docstring's indentation; delimiter-only lines go."""
    quote = docstring_quote(code)
    doc_start = code.find(quote, code.find(entry_point))
    line_start = code.rfind("\n", 0, doc_start) + 1
    indent = code[line_start:doc_start]
    if doc_start < 0 or indent.strip(BLANKS):
        return code  # no docstring, or one that does not start its line: ReCode stops there
    doc_end = code.find(quote, doc_start + 3)
    line_end = doc_end + 3
    if code[line_end:line_end + 1] != "\n":
        return code
    lines = [comment_line(line, quote, indent) for line in code[line_start:line_end + 1].split("\n")
             if line.replace(" ", "").replace("\t", "") != quote]
    return code[:line_start] + "\n".join(lines) + code[line_end + 1:]


def new_line_aftercode(code: str, entry_point: str) -> str:
    return code + "\n"


def new_line_afterdoc(code: str, entry_point: str) -> str:
    end = after_docstring(code, entry_point)
    return code[:end] + "\n" + code[end:]


def new_lines(code: str, entry_point: str, rng: random.Random, prob: float = 0.5) -> str:
    """After each newline following the docstring, another one with probability `prob`."""
    end = after_docstring(code, entry_point)
    out = []
    for ch in code[end:]:
        out.append(ch)
        if ch == "\n" and rng.random() < prob:
            out.append("\n")
    return code[:end] + "".join(out)


class RecodeStream(Perturbation):
    """ReCode draws from one generator seeded 42 + s over the benchmark in order, so a variant
    equals the release's when the whole benchmark is perturbed in its order (a subset draws
    from the start of the stream)."""

    randomized = True
    sequential = True
    first_seed = 42  # ReCode's --rng-seed default; seed s draws from Random(42 + s)

    def apply_sequence(self, problems: list[Problem], seed: int) -> list[Problem]:
        rng = random.Random(self.first_seed + seed)
        return [self.apply(problem, rng) for problem in problems]


class RecodeFormat(Perturbation):
    """A ReCode format function `(code, entry_point) -> code` applied to ReCode's partial prompt."""

    category = CODE_FORMAT
    randomized = False
    splits_itself = True  # takes the full problem and makes ReCode's partial prompt itself

    def apply(self, problem: Problem, rng: random.Random) -> Problem:
        partial = recode_partial_problem(problem)
        prompt = self.transform(partial.prompt, partial.entry_point, rng)
        return partial if prompt == partial.prompt else partial.with_changes(prompt=prompt)

    def transform(self, code: str, entry_point: str, rng: random.Random) -> str:
        return self.function(code, entry_point)

    def function(self, code: str, entry_point: str) -> str:
        raise NotImplementedError


class RecodeTabIndent(RecodeFormat):
    name = "tab_indent"
    description = "each leading indentation unit replaced by a tab (or a tab by four spaces)"
    function = staticmethod(tab_indent)


class RecodeSplitLines(RecodeFormat):
    name = "split_lines"
    description = "the longest line after the docstring split with ` \\ ` before its middle word"
    function = staticmethod(split_lines)


class RecodeDoc2Comments(RecodeFormat):
    name = "doc2comments"
    description = "the docstring turned into `#` comments, whitespace-only lines as `#  `"
    function = staticmethod(doc2comments)


class RecodeNewLineAfterCode(RecodeFormat):
    name = "new_line_aftercode"
    description = "a newline appended to the prompt"
    function = staticmethod(new_line_aftercode)


class RecodeNewLineAfterDoc(RecodeFormat):
    name = "new_line_afterdoc"
    description = "a newline right after the docstring's closing quotes"
    function = staticmethod(new_line_afterdoc)


class RecodeNewLines(RecodeStream, RecodeFormat):
    name = "new_lines"
    description = "after each newline following the docstring, another with p=0.5"

    def transform(self, code: str, entry_point: str, rng: random.Random) -> str:
        return new_lines(code, entry_point, rng)
