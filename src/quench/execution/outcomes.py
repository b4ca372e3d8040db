"""Typed results of running one program: an `Outcome` plus a separate human-readable detail."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Outcome(StrEnum):
    """How a program ended. Only `passed` means every test ran to completion without error."""

    passed = "passed"  # the program ran to the end (completion sentinel received)
    failed = "failed"  # an exception escaped, e.g. AssertionError from `check`
    timeout = "timeout"  # wall-clock or CPU-time limit hit
    memory = "memory"  # MemoryError under the address-space limit
    crashed = "crashed"  # killed by a signal or exited early (sys.exit / os._exit before the end)
    syntax_error = "syntax_error"  # the program does not compile
    sandbox_error = "sandbox_error"  # the harness failed, not the program


@dataclass(frozen=True)
class ExecutionResult:
    """One program's outcome; `detail` says why (exception type and message tail, signal, limit)."""

    outcome: Outcome
    detail: str = ""
    seconds: float = 0.0  # wall-clock time of the program's process

    @property
    def passed(self) -> bool:
        return self.outcome is Outcome.passed

    def to_json(self) -> dict[str, object]:
        return {"outcome": self.outcome.value, "detail": self.detail, "seconds": round(self.seconds, 4)}
