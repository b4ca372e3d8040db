"""What the model is trained to write for a problem, and where a variant differs from its nominal.

Chat models answer the chat-formatted prompt with the whole function in one code fence, the
answer the sanitizer expects: "```python\\n<prompt + solution>\\n```" then the end-of-turn token.
Completion models are trained as CodeFort trains them, causal LM on the whole program
(prompt + solution). Either way the target repeats the prompt's code (the "echo"): masked data
augmentation leaves the perturbed characters of the echo out of the loss.
"""

from __future__ import annotations

import difflib
import keyword
import re
from dataclasses import dataclass
from typing import Callable

from quench.datasets import Problem

FENCE_OPEN = "```python\n"
FENCE_CLOSE = "\n```"
# Identifiers, whitespace runs, single other characters: a renamed variable is one replaced word.
WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+|\s+|.", re.DOTALL)
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class TrainText:
    prefix: str  # conditioning text, never a target (the chat turn; "" for completion models)
    target: str  # trained text; the end-of-sequence token is appended at encoding
    echo: tuple[int, int]  # [start, end) of `target` that repeats the prompt's code


def whole_program(problem: Problem) -> str:
    """prompt + solution without the leading blank lines and trailing whitespace."""
    return (problem.prompt + problem.canonical_solution).lstrip("\n").rstrip()


def train_text(problem: Problem, prompt_format: str, format_prompt: Callable[[str], str]) -> TrainText:
    if prompt_format == "chat":
        code = whole_program(problem)
        echo_end = len(FENCE_OPEN) + min(len(problem.prompt.lstrip("\n")), len(code))
        return TrainText(format_prompt(problem.prompt), FENCE_OPEN + code + FENCE_CLOSE, (len(FENCE_OPEN), echo_end))
    program = problem.prompt + problem.canonical_solution.rstrip() + "\n"
    return TrainText("", program, (0, len(problem.prompt)))


def words(text: str) -> list[str]:
    return WORD.findall(text)


@dataclass(frozen=True)
class Change:
    """A replaced or inserted run of the variant: old words, new words, its character span."""

    old: tuple[str, ...]
    new: tuple[str, ...]
    span: tuple[int, int]  # in the variant


def changes(nominal: str, variant: str) -> list[Change]:
    """Line diff first (inserted lines stay whole lines), then a word diff inside replaced lines."""
    old_lines, new_lines = nominal.splitlines(keepends=True), variant.splitlines(keepends=True)
    line_starts = [0]
    for line in new_lines:
        line_starts.append(line_starts[-1] + len(line))
    out = []
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "insert":
            out.append(Change((), tuple(new_lines[j1:j2]), (line_starts[j1], line_starts[j2])))
        elif tag == "replace":
            out.extend(word_changes("".join(old_lines[i1:i2]), "".join(new_lines[j1:j2]), line_starts[j1]))
    return out


def word_changes(old: str, new: str, offset: int) -> list[Change]:
    old_words, new_words = words(old), words(new)
    starts = [offset]
    for w in new_words:
        starts.append(starts[-1] + len(w))
    out = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old_words, new_words, autojunk=False).get_opcodes():
        if tag in ("replace", "insert"):
            out.append(Change(tuple(old_words[i1:i2]), tuple(new_words[j1:j2]), (starts[j1], starts[j2])))
    return out


def perturbed_spans(nominal: str, variant: str) -> list[tuple[int, int]]:
    """Character spans of `variant` that are not in `nominal` (inserted or replaced text)."""
    return [c.span for c in changes(nominal, variant) if c.span[1] > c.span[0]]


def renamed_identifiers(nominal: str, variant: str) -> frozenset[str]:
    """Old and new names where one identifier replaces another (a renaming, not a rewrite)."""
    names: set[str] = set()
    for change in changes(nominal, variant):
        if len(change.old) != len(change.new):
            continue
        for old, new in zip(change.old, change.new):
            if all(IDENTIFIER.fullmatch(w) and not keyword.iskeyword(w) for w in (old, new)):
                names.update((old, new))
    return frozenset(names)


def clip_spans(spans: list[tuple[int, int]], offset: int, window: tuple[int, int]) -> list[tuple[int, int]]:
    """Spans moved by `offset` and cut to `window`; empty ones dropped."""
    out = []
    for start, end in spans:
        start, end = max(start + offset, window[0]), min(end + offset, window[1])
        if end > start:
            out.append((start, end))
    return out


def echo_mask_spans(nominal: TrainText, variant: TrainText) -> list[tuple[int, int]]:
    """Spans of the variant's target to leave out of the loss: its perturbed characters in the echo.

    The rest of the answer (the solution after the prompt) stays a target even where it changed:
    a context-sensitive edit (a renamed variable) must be written consistently.
    """
    spans = perturbed_spans(nominal.target, variant.target)
    return clip_spans(spans, 0, variant.echo)
