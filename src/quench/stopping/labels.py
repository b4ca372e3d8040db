"""The labelling rule for GenGuard's training data: which generated tokens are excess.

Rule (version "sanitized-end-v2"): the required code is the code quench's sanitizer keeps.
Python (as in v1): in a chat answer, the top-level imports, definitions and assignments of the
code block that defines the entry point; in a raw completion, the continuation up to the first
top-level statement, trimmed until prompt + completion parses; the required code ends at the end
of the line of the last kept statement. MBXP's brace languages (JavaScript, Go, C++, Java; the
brace scan of `execution/sanitize_braces.py`): in a chat answer, the fenced block that defines the
entry point, up to the end of the line of the brace that closes the entry point's definition
(helpers before it are kept, code after it is not: the sanitizer drops it); in a raw completion,
up to the end of the line of the brace that closes every block the prompt left open.
A token that starts before that point is "continue" (0); every later token — blank lines, test
code, a `main`, the closing fence, prose — is "stop" (1).

Answers whose end cannot be told are left out (`None`): no code block or no definition of the entry
point, or an answer cut by the token limit before its code closed (the code may not be finished).
"""

from __future__ import annotations

import ast
from typing import Any, Sequence

from quench.datasets import Problem
from quench.datasets.languages import LANGUAGES
from quench.execution.sanitize_braces import cut_after_close, definition_start, open_depth
from quench.execution.sanitized import FENCE
from quench.execution.sanitize import (
    KEPT_TOP_LEVEL,
    cut_at_top_level,
    defines,
    is_main_guard,
    longest_parsable_prefix,
)

RULE = "sanitized-end-v2"
CONTINUE, STOP = 0, 1


def excess_start(problem: Problem, text: str, prompt_format: str, finished: bool = True) -> int | None:
    """Offset in `text` where the excess begins, or None when the rule cannot tell.

    finished: the answer ended by itself (EOS or a stop), not by the token limit.
    """
    if problem.language != "python":
        if prompt_format == "chat":
            return _braced_chat_end(problem, text, finished)
        return _braced_completion_end(problem, text, finished)
    if prompt_format == "chat":
        return _chat_end(problem, text, finished)
    return _completion_end(problem, text, finished)


def _chat_end(problem: Problem, text: str, finished: bool) -> int | None:
    blocks = list(FENCE.finditer(text))
    chosen = next((m for m in blocks if defines(m.group(2), problem.entry_point)), blocks[0] if blocks else None)
    if chosen is None:
        return None
    closed = text[chosen.end(2) : chosen.end()] == "```"
    if not closed and not finished:
        return None
    body = longest_parsable_prefix(chosen.group(2))
    end_line = _last_kept_line(body)
    if end_line is None or not defines(body, problem.entry_point):
        return None
    lines = body.splitlines(keepends=True)
    return chosen.start(2) + len("".join(lines[:end_line]))


def _last_kept_line(code: str) -> int | None:
    """The 1-based last line of the last statement the sanitizer keeps (None if it keeps none)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    kept = [node for node in tree.body if isinstance(node, KEPT_TOP_LEVEL) and not is_main_guard(node)]
    return kept[-1].end_lineno if kept else None


def _completion_end(problem: Problem, text: str, finished: bool) -> int | None:
    cut = cut_at_top_level(text) if problem.prompt.endswith("\n") or not text else text
    if len(cut) == len(text) and not finished:
        return None  # no top-level statement yet: the body may go on
    kept = longest_parsable_prefix(cut, problem.prompt)
    return _code_end(kept)


def _braced_chat_end(problem: Problem, text: str, finished: bool) -> int | None:
    tags = set(LANGUAGES[problem.language].fences) | {""}
    blocks = [m for m in FENCE.finditer(text) if m.group(1).lower() in tags] or list(FENCE.finditer(text))
    for block in blocks:
        start = definition_start(block.group(2), problem.entry_point)
        if start is None:
            continue
        closed = text[block.end(2) : block.end()] == "```"
        function = cut_after_close(block.group(2)[start:], 0)
        if function is not None:
            return _line_end(text, block.start(2) + start + len(function))
        return block.end(2) if closed or finished else None  # never closes: the sanitizer keeps the whole block
    return None


def _braced_completion_end(problem: Problem, text: str, finished: bool) -> int | None:
    depth = open_depth(problem.prompt)
    if depth <= 0:
        return None
    cut = cut_after_close(text, depth)
    if cut is None:
        if not finished:
            return None  # the body may go on
        return _code_end(text)
    return _line_end(text, len(cut))


def _code_end(code: str) -> int:
    """The offset after the last line that holds code (its newline included): trailing blank lines are excess."""
    kept = code.rstrip()
    return len(kept) + 1 if code[len(kept) : len(kept) + 1] == "\n" else len(kept)


def _line_end(text: str, offset: int) -> int:
    """The offset after the newline that ends the line holding `offset - 1` (the end of text if none)."""
    newline = text.find("\n", offset)
    return len(text) if newline < 0 else newline + 1


def token_starts(tokenizer: Any, token_ids: Sequence[int]) -> list[int]:
    """Character offset where each token's text starts in the decoded sequence."""
    starts, ids = [], list(token_ids)
    for k in range(len(ids)):
        starts.append(len(tokenizer.decode(ids[:k], skip_special_tokens=True)))
    return starts


def token_labels(starts: Sequence[int], excess_at: int) -> list[int]:
    """CONTINUE for tokens starting before the excess, STOP from there on."""
    return [STOP if start >= excess_at else CONTINUE for start in starts]
