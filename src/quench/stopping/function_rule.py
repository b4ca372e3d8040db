"""The "function complete" rule: stop once the target function's body has ended.

The body has ended at the first logical line, after at least one line of body, whose indentation
is at or left of the target `def` (comments and blank lines do not count, as for Python's own
tokenizer), or at the closing fence of the chat answer's code block that holds the target. With
`keep_definitions` (the default for chat answers, whose sanitizer keeps helpers) a `def`, `class`,
decorator or import there does not end the code; the next other statement at that level does.

MBXP's brace languages (`BracedFunctionComplete`): a completion ends right after the brace that
closes every block the prompt left open (the function, and Java's class), skipping braces in
strings and comments as the brace sanitizer does; a chat answer ends at the closing fence of the
block that defines the target. `function_scanner` picks the scanner for a rule.

The Python scanner is incremental: `feed` looks at the new text and the unfinished last line only, and it
decides on an unfinished line as soon as its first characters settle the question (a closing fence
after three backticks, `print(` after its first letter), which saves the rest of that line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from quench.stopping.pylex import LexState, indent_width, lex_line

DEF_LINE = re.compile(r"(?:async\s+)?def\s+([A-Za-z_]\w*)\s*\(")
DEFINITION_WORDS = ("def", "async", "class", "import", "from")


@dataclass(frozen=True)
class FunctionRule:
    """Settings of the rule for one prompt."""

    prompt_format: str = "chat"  # "chat": the answer is prose and fenced code; "completion": code continuing the prompt
    entry_point: str | None = None  # the target function; None = the first function defined
    at_fence: bool = True  # stop at the closing fence of the block holding the target (chat)
    at_dedent: bool = True  # stop at a statement at or left of the target's `def` after its body
    keep_definitions: bool | None = None  # None: True for chat answers, False for completions
    language: str = "python"  # MBXP's brace languages ("javascript", "go", "cpp", "java") end at braces

    @property
    def keeps_definitions(self) -> bool:
        return self.prompt_format == "chat" if self.keep_definitions is None else self.keep_definitions


class FunctionComplete:
    """One row's scanner. `feed(text)` returns the offset where excess text starts, once known."""

    def __init__(self, rule: FunctionRule, prompt: str = "") -> None:
        self.rule = rule
        self.lex = LexState()
        self.chat = rule.prompt_format == "chat"
        self.in_fence = False
        self.in_code = not self.chat  # chat answers start in prose
        self.target_indent: int | None = None
        self.in_header = False  # inside the target's `def` line(s), before its colon
        self.body_seen = False
        self.stop_at: int | None = None
        self.line = ""  # the unfinished last line
        self.line_start = 0  # its offset in the generated text
        self.origin = 0
        if prompt and not self.chat:
            self.feed(prompt)  # a completion continues the prompt: find the target `def` there
            self.origin = len(prompt)
            self.stop_at = None  # the prompt itself never stops
        self.line_start -= self.origin

    def feed(self, new_text: str) -> int | None:
        """Add generated text; return the stop offset (in generated text) once the function is complete."""
        if self.stop_at is not None:
            return self.stop_at
        text = self.line + new_text
        begin = 0
        while (end := text.find("\n", begin)) >= 0 and self.stop_at is None:
            self._complete_line(text[begin:end])
            self.line_start += end - begin + 1
            begin = end + 1
        self.line = text[begin:]
        if self.stop_at is None and self.line:
            self._partial_line(self.line)
        return self.stop_at

    def _stop(self) -> None:
        self.stop_at = max(self.line_start, 0)

    def _complete_line(self, line: str) -> None:
        significant = self.lex.at_logical_start and _has_code(line)
        if self.lex.at_logical_start and self._decide(line):
            return
        if self.in_code:
            lex_line(line, self.lex)
            self._after_line(significant)

    def _partial_line(self, line: str) -> None:
        """Stop early on an unfinished line when its start settles it; never change other state here."""
        if not self.lex.at_logical_start:
            return
        stripped = line.lstrip(" \t\f")
        if self.chat and stripped.startswith("```"):
            if self._fence_stops():
                self._stop()
        elif self.in_code and stripped and not stripped.startswith(("#", "`")):
            self._maybe_end(stripped, indent_width(line), complete=False)

    def _decide(self, line: str) -> bool:
        """A complete line that starts a logical line; True when it is consumed (fence, prose or stop)."""
        stripped = line.lstrip(" \t\f")
        if not stripped:
            return False
        if self.chat and stripped.startswith("```"):
            self._fence()
            return True
        if not self.in_code:
            if not (self.chat and DEF_LINE.match(stripped)):
                return True  # prose
            self.in_code = True  # code without a fence
        if stripped.startswith("#"):
            return False
        if self._maybe_end(stripped, indent_width(line), complete=True):
            return True
        if self.target_indent is None and (match := DEF_LINE.match(stripped)):
            if self.rule.entry_point is None or match.group(1) == self.rule.entry_point:
                self.target_indent = indent_width(line)
                self.in_header = True
        return False

    def _fence_stops(self) -> bool:
        if self.target_indent is None or not (self.in_fence or self.in_code):
            return False
        return self.rule.at_fence or (self.rule.at_dedent and self.body_seen)

    def _fence(self) -> None:
        if self._fence_stops():
            self._stop()
        elif self.in_fence or (self.in_code and self.target_indent is not None):
            self.in_fence = self.in_code = False  # a block without the target: look at the next one
            self.lex = LexState()
            self.target_indent, self.in_header, self.body_seen = None, False, False
        else:
            self.in_fence = self.in_code = True

    def _maybe_end(self, stripped: str, indent: int, complete: bool) -> bool:
        """At a logical line's start: stop if the target's body is over and this is not kept code."""
        if not self.rule.at_dedent or self.target_indent is None or not self.body_seen:
            return False
        if indent > self.target_indent:
            return False
        if self.rule.keeps_definitions:
            if stripped.startswith("@"):
                return False
            word = re.match(r"\w*", stripped).group(0)
            if word == stripped and not complete and any(w.startswith(word) for w in DEFINITION_WORDS):
                return False  # "de" may yet become "def"
            if word in DEFINITION_WORDS:
                return False
        self._stop()
        return True

    def _after_line(self, significant: bool) -> None:
        """Track the target's header and body after a physical line was lexed."""
        if self.target_indent is None or self.body_seen:
            return
        if self.in_header:
            if self.lex.at_logical_start:  # the header's logical line is over
                self.in_header = False
                self.body_seen = self.lex.last_code != ":"  # `def f(): return 1` has its body inline
            return
        self.body_seen = significant


def _has_code(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


class BracedFunctionComplete:
    """One row's scanner for a brace language, with `FunctionComplete`'s `feed`."""

    def __init__(self, rule: FunctionRule, prompt: str = "") -> None:
        from quench.execution.sanitize_braces import open_depth

        self.rule = rule
        self.chat = rule.prompt_format == "chat"
        self.depth = 0 if self.chat else open_depth(prompt)  # blocks the prompt leaves open
        self.text = ""
        self.stop_at: int | None = None

    def feed(self, new_text: str) -> int | None:
        """Add generated text; return the stop offset (in generated text) once the function is complete."""
        if self.stop_at is not None:
            return self.stop_at
        self.text += new_text
        if self.chat:
            self.stop_at = self._closing_fence() if self.rule.at_fence and "`" in self.text else None
        elif self.rule.at_dedent and self.depth > 0 and "}" in new_text:  # only a new `}` can close the body
            self.stop_at = self._after_close()
        return self.stop_at

    def _after_close(self) -> int | None:
        from quench.execution.sanitize_braces import cut_after_close

        cut = cut_after_close(self.text, self.depth)
        return None if cut is None else len(cut)

    def _closing_fence(self) -> int | None:
        """The start of the fence line that closes a block defining the target (an unfinished one counts)."""
        from quench.execution.sanitize_braces import definition_start

        in_fence, block_start, line_start = False, 0, 0
        for line in self.text.split("\n"):
            if line.lstrip().startswith("```"):
                if in_fence and self._defines(self.text[block_start:line_start], definition_start):
                    return line_start
                in_fence, block_start = not in_fence, line_start + len(line) + 1
            line_start += len(line) + 1
        return None

    def _defines(self, code: str, definition_start) -> bool:
        return self.rule.entry_point is None or definition_start(code, self.rule.entry_point) is not None


def function_scanner(rule: FunctionRule, prompt: str = "") -> FunctionComplete | BracedFunctionComplete:
    """The rule's scanner: Python's indentation scanner, or the brace scanner for MBXP's languages."""
    if rule.language == "python":
        return FunctionComplete(rule, prompt)
    return BracedFunctionComplete(rule, prompt)
