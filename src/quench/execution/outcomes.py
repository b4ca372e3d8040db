"""Typed results of running one program: an `Outcome` plus a separate human-readable detail."""

from __future__ import annotations

import os
import re
import signal
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Mapping

from quench.execution.sandbox import SandboxLimits


class Outcome(StrEnum):
    """How a program ended. Only `passed` means every test ran to completion without error."""

    passed = "passed"  # the program ran to the end (completion sentinel received)
    failed = "failed"  # an exception escaped, e.g. AssertionError from `check`
    timeout = "timeout"  # wall-clock or CPU-time limit hit
    memory = "memory"  # MemoryError under the address-space limit
    crashed = "crashed"  # killed by a signal or exited early (sys.exit / os._exit, or any exit before the harness reported)
    lying_value = "lying_value"  # a tested function returned a value whose type is not a builtin value type
    syntax_error = "syntax_error"  # the program does not compile
    compile_error = "compile_error"  # a compiled language's build failed (g++, javac, go, node's parser)
    sandbox_error = "sandbox_error"  # the harness failed, not the program


@dataclass(frozen=True)
class ExecutionResult:
    """One program's outcome; `detail` says why (exception type and message tail, signal, limit)."""

    outcome: Outcome
    detail: str = ""
    seconds: float = 0.0  # wall-clock time of the program's process
    flaky_timeout: bool = False  # it timed out once, and re-run with the same limit it did not
    # CPU seconds of the program's processes, where the fork server reaped them all (None: not known, e.g. a
    # JavaScript program run by the warm host); not part of the verdict.
    cpu_seconds: float | None = field(default=None, compare=False)

    @property
    def passed(self) -> bool:
        return self.outcome is Outcome.passed

    def to_json(self) -> dict[str, object]:
        record: dict[str, object] = {"outcome": self.outcome.value, "detail": self.detail, "seconds": round(self.seconds, 4)}
        return {**record, "flaky_timeout": True} if self.flaky_timeout else record


# What another language's launcher raises (quench.datasets.languages): the build failed, the run failed,
# the program exited before its harness reported.
COMPILE_ERROR, PROGRAM_FAILED, EXITED_EARLY = "CompileError", "ProgramFailed", "ExitedEarly"
LAUNCHER_ERRORS = (f"{COMPILE_ERROR}: ", f"{PROGRAM_FAILED}: ", f"{EXITED_EARLY}: ")
LAUNCHER_OUTCOMES = {COMPILE_ERROR: "compile_error", PROGRAM_FAILED: "failed", EXITED_EARLY: "crashed"}
# What a Python program's judge raises for a returned value that is not a plain value, and for a program that
# does not compile (quench.datasets.judge).
LYING_VALUE, PROGRAM_SYNTAX_ERROR = "LyingValue: ", "ProgramSyntaxError: "
UNHINDERED_SHARE = 0.95  # CPU seconds over the wall limit from which a timeout may be the program's own ...
STALLED_SHARE = 0.05  # ... where some task waited for a CPU for at most this share of its run
SANDBOX_EXIT = 125  # exit status of a child that could not set itself up (as in node_host.py)
RECORD_KINDS = {  # the letter after the nonce in a child's completion record
    "P": Outcome.passed,
    "F": Outcome.failed,
    "M": Outcome.memory,
    "S": Outcome.syntax_error,
    "X": Outcome.crashed,  # SystemExit: sys.exit() / exit() before the end
    "E": Outcome.sandbox_error,
}


def classify(report: Mapping[str, object], limits: SandboxLimits) -> ExecutionResult:
    """Turn a fork server's report into a result: the child's own record wins, else how it ended.

    Report fields: record (kind letter or None), detail, status (wait status), stopped
    ("timeout" / "processes" when the server killed it), output (tail), seconds, cpu_s.
    """
    result = _verdict(report, limits)
    cpu = report.get("cpu_s")
    return replace(result, cpu_seconds=float(cpu)) if isinstance(cpu, (int, float)) else result


def ran_unhindered(result: ExecutionResult, timeout_s: float, stalled: float | None) -> bool:
    """Whether a program that ran out of time did so on its own work: its processes spent nearly all of its limit
    on the CPU, and no task on the machine waited for a CPU meanwhile (`stalled`: that share of its run, None where
    unknown). A second run would end the same way; a busy machine slows a program by taking its CPU, and a
    program with several threads can spend its limit's worth of CPU while each of them waits."""
    return (result.cpu_seconds is not None and result.cpu_seconds >= UNHINDERED_SHARE * timeout_s
            and stalled is not None and stalled <= STALLED_SHARE)


def _verdict(report: Mapping[str, object], limits: SandboxLimits) -> ExecutionResult:
    kind, detail = report.get("record"), str(report.get("detail", ""))
    seconds = float(report.get("seconds", 0.0))  # type: ignore[arg-type]
    if isinstance(kind, str) and kind in RECORD_KINDS:
        if kind == "X":
            detail += " before the tests finished"
        elif kind == "M":
            detail = f"{detail or 'MemoryError'} (address-space limit {limits.memory_mb} MB)"
        if kind == "F" and detail.startswith(LAUNCHER_ERRORS):  # another language's launcher (build or run)
            outcome = Outcome(LAUNCHER_OUTCOMES[detail.split(":", 1)[0]])
            message = re.sub(r" \(line \d+\)$", "", detail.split(":", 1)[-1].strip())  # not the launcher's line
            return ExecutionResult(outcome, message, seconds)
        if kind == "F" and detail.startswith(PROGRAM_SYNTAX_ERROR):
            return ExecutionResult(Outcome.syntax_error, re.sub(r" \(line \d+\)$", "", detail[len(PROGRAM_SYNTAX_ERROR):]), seconds)
        if kind == "F" and detail.startswith(LYING_VALUE):
            return ExecutionResult(Outcome.lying_value, re.sub(r" \(line \d+\)$", "", detail[len(LYING_VALUE):]), seconds)
        return ExecutionResult(RECORD_KINDS[kind], detail, seconds)
    if report.get("stopped") == "timeout":
        limit = float(report.get("timeout_s") or limits.timeout_s)  # type: ignore[arg-type]
        return ExecutionResult(Outcome.timeout, f"no result within {limit:g} s (wall clock)", seconds)
    if report.get("stopped") == "processes":
        return ExecutionResult(Outcome.crashed, f"more than {limits.max_processes} processes (fork bomb?)", seconds)
    if not isinstance(report.get("status"), int):
        return ExecutionResult(Outcome.sandbox_error, f"malformed report from the sandbox: {report!r}"[:300], seconds)
    outcome, detail = _how_it_ended(int(report["status"]))  # type: ignore[call-overload]
    output = str(report.get("output", ""))
    if outcome is Outcome.crashed and "MemoryError" in output:
        outcome = Outcome.memory
    return ExecutionResult(outcome, detail + (f"; output: {output}" if output else ""), seconds)


def _how_it_ended(status: int) -> tuple[Outcome, str]:
    """A child that left no record: killed by a signal, or exited early."""
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        if signum == signal.SIGXCPU:
            return Outcome.timeout, "CPU time limit exceeded"
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        return Outcome.crashed, f"killed by {name}"
    code = os.WEXITSTATUS(status)
    if code == SANDBOX_EXIT:
        return Outcome.sandbox_error, "the sandboxed child could not be set up"
    return Outcome.crashed, f"exited with status {code} before the tests finished"
