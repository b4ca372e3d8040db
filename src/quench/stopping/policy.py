"""GenGuard's stopping policy (CodeFast, Guo et al., ISSTA 2024, §3): from per-token votes to a stop.

Each generated token gets a vote, "stop" (the token is excess) or "continue". Policies:
- line voting (CodeFast's default): when a line ends, stop if fewer than half of its tokens voted
  "continue"; the output keeps the lines before it.
- consecutive: stop at N "stop" votes in a row; the output keeps the tokens before the first.
- empty lines (with either): stop after more than `max_empty_lines` empty lines in a row.

A token belongs to the line its first character is on; a token holding newlines ends that line
(and any empty lines inside it). `TokenShape` says where a token's newlines fall.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GuardPolicy:
    """How votes become a stop; stored with a trained guard and overridable at load time."""

    mode: str = "lines"  # "lines" (line voting) or "consecutive"
    consecutive: int = 3  # N for mode "consecutive"
    max_empty_lines: int = 3  # stop after more than this many empty lines in a row; 0 = off
    threshold: float = 0.5  # a token votes "stop" when its stop probability is at least this

    def __post_init__(self) -> None:
        if self.mode not in ("lines", "consecutive"):
            raise ValueError(f"policy mode must be 'lines' or 'consecutive', got {self.mode!r}")
        if self.consecutive < 1:
            raise ValueError(f"consecutive must be >= 1, got {self.consecutive}")
        if self.max_empty_lines < 0:
            raise ValueError(f"max_empty_lines must be >= 0, got {self.max_empty_lines}")
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1], got {self.threshold}")


@dataclass(frozen=True)
class TokenShape:
    """Where a token's text has newlines: enough to follow lines without decoding text."""

    newlines: int = 0
    head_blank: bool = True  # the text before the first newline (all of it, without one) is whitespace
    tail_blank: bool = True  # the text after the last newline is whitespace

    @staticmethod
    def of(text: str) -> "TokenShape":
        parts = text.split("\n")
        return TokenShape(len(parts) - 1, not parts[0].strip(), not parts[-1].strip())


class RowPolicy:
    """One row's policy state; `feed` one token at a time, in generation order."""

    def __init__(self, policy: GuardPolicy) -> None:
        self.policy = policy
        self.position = 0  # tokens fed
        self.line_start = 0  # index of the current line's first token
        self.line_tokens = 0
        self.line_continue = 0  # "continue" votes in the current line
        self.line_blank = True  # the current line has only whitespace so far
        self.empty_run = 0  # empty lines in a row, ended
        self.empty_keep = 0  # tokens to keep if the run of empty lines stops the row
        self.stop_run = 0  # "stop" votes in a row

    def feed(self, stop_vote: bool, shape: TokenShape) -> int | None:
        """Count one token; return the number of tokens to keep if the row stops here."""
        index = self.position
        self.position += 1
        self.line_tokens += 1
        self.line_continue += not stop_vote
        self.line_blank = self.line_blank and shape.head_blank
        self.stop_run = self.stop_run + 1 if stop_vote else 0
        if self.policy.mode == "consecutive" and self.stop_run >= self.policy.consecutive:
            return index + 1 - self.stop_run
        if shape.newlines == 0:
            return None
        return self._end_lines(index, shape)

    def _end_lines(self, index: int, shape: TokenShape) -> int | None:
        """The token at `index` ends its line (and holds `newlines - 1` empty lines)."""
        if self.policy.mode == "lines" and 2 * self.line_continue < self.line_tokens:
            return self.line_start
        if self.line_blank:
            if self.empty_run == 0:
                self.empty_keep = self.line_start
            self.empty_run += 1
        else:
            self.empty_run = 0
        if shape.newlines > 1:  # whole empty lines inside the token
            if self.empty_run == 0:
                self.empty_keep = index + 1  # the run starts inside this token: keep the token
            self.empty_run += shape.newlines - 1
        limit = self.policy.max_empty_lines
        if limit and self.empty_run > limit:
            return self.empty_keep
        self.line_start = index + 1
        self.line_tokens = self.line_continue = 0
        self.line_blank = shape.tail_blank
        return None
