"""What a guarded row may stream: the tokens a stop observer (GenGuard) can no longer take back."""

from __future__ import annotations

# With a stop observer (GenGuard) a row's last tokens may still be taken back when it stops: GenGuard
# cuts at the start of the current line, of a run of blank lines, or of its last few "stop" votes. So
# with one, a row publishes only tokens before its current line and trailing blank lines, and at least
# this many tokens before its end (or all of them once it finishes).
GUARD_HOLDBACK = 32


def settled_text(text: str) -> int:
    """Characters of `text` before its current (unfinished) line and any blank lines right before it."""
    cut = text.rfind("\n") + 1
    while cut > 0:
        start = text.rfind("\n", 0, cut - 1) + 1
        if text[start : cut - 1].strip():
            break
        cut = start
    return cut


def tokens_before(pieces: list[str], chars: int) -> int:
    """How many leading tokens (their texts: `pieces`) end within the first `chars` characters."""
    count, end = 0, 0
    for piece in pieces:
        end += len(piece)
        if end > chars:
            break
        count += 1
    return count
