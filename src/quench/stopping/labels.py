"""The labelling rule for GenGuard's training data: which generated tokens are excess.

Rule (version "sanitized-end-v1"): the required code is the code quench's sanitizer keeps. In a
chat answer that is the top-level imports, definitions and assignments of the code block that
defines the entry point (else the first block); in a raw completion, the continuation up to the
first top-level statement, trimmed until prompt + completion parses. The required code ends at the
end of the line of the last kept statement (trailing blank lines are excess). A token that starts
before that point is "continue" (0); every later token — blank lines, test code, the closing
fence, prose — is "stop" (1).

Answers whose end cannot be told are left out (`None`): no code block or no entry point, or an
answer cut by the token limit whose code block never closed (the code may not be finished).
"""

from __future__ import annotations

import ast
from typing import Any, Sequence

from quench.datasets import Problem
from quench.execution.sanitize import (
    FENCE,
    KEPT_TOP_LEVEL,
    cut_at_top_level,
    defines,
    is_main_guard,
    longest_parsable_prefix,
)

RULE = "sanitized-end-v1"
CONTINUE, STOP = 0, 1


def excess_start(problem: Problem, text: str, prompt_format: str, finished: bool = True) -> int | None:
    """Offset in `text` where the excess begins, or None when the rule cannot tell.

    finished: the answer ended by itself (EOS or a stop), not by the token limit.
    """
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
    code = kept.rstrip()
    return len(code) + 1 if kept[len(code) : len(code) + 1] == "\n" else len(code)  # trailing blank lines are excess


def token_starts(tokenizer: Any, token_ids: Sequence[int]) -> list[int]:
    """Character offset where each token's text starts in the decoded sequence."""
    starts, ids = [], list(token_ids)
    for k in range(len(ids)):
        starts.append(len(tokenizer.decode(ids[:k], skip_special_tokens=True)))
    return starts


def token_labels(starts: Sequence[int], excess_at: int) -> list[int]:
    """CONTINUE for tokens starting before the excess, STOP from there on."""
    return [STOP if start >= excess_at else CONTINUE for start in starts]
