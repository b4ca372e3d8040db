"""Classifying a fork server's report: the child's record first, else how the child ended."""

from __future__ import annotations

import signal

import pytest

from quench.execution import Outcome, SandboxLimits, forkserver
from quench.execution.outcomes import SANDBOX_EXIT, classify

LIMITS = SandboxLimits(timeout_s=2.0, memory_mb=300, max_processes=10)


def exited(code: int) -> int:
    return code << 8  # a wait status, as os.waitpid returns it


@pytest.mark.parametrize(
    ("report", "outcome", "detail"),
    [
        ({"record": "P", "detail": ""}, Outcome.passed, ""),
        ({"record": "F", "detail": "AssertionError (line 9)"}, Outcome.failed, "AssertionError (line 9)"),
        (
            {"record": "X", "detail": "SystemExit: 0 (line 2)"},
            Outcome.crashed,
            "SystemExit: 0 (line 2) before the tests finished",
        ),
        ({"record": "M", "detail": ""}, Outcome.memory, "MemoryError (address-space limit 300 MB)"),
        ({"record": "S", "detail": "SyntaxError: bad (line 1)"}, Outcome.syntax_error, "SyntaxError: bad (line 1)"),
        ({"record": "E", "detail": "sandbox setup: OSError()"}, Outcome.sandbox_error, "sandbox setup: OSError()"),
        (
            {"record": "F", "detail": "ExitedEarly: exited with status 0 before the tests finished (line 80)"},
            Outcome.crashed,
            "exited with status 0 before the tests finished",
        ),
        (
            {"record": "F", "detail": "LyingValue: the program returned a m.Liar, not a builtin value type (line 3)"},
            Outcome.lying_value,
            "the program returned a m.Liar, not a builtin value type",
        ),
        (
            {"record": "F", "detail": "ProgramSyntaxError: SyntaxError: bad (line 2) (line 6)"},
            Outcome.syntax_error,
            "SyntaxError: bad (line 2)",
        ),
        ({"record": None, "status": 9, "stopped": "timeout"}, Outcome.timeout, "no result within 2 s (wall clock)"),
        ({"record": None, "stopped": "processes"}, Outcome.crashed, "more than 10 processes (fork bomb?)"),
        ({"record": None, "status": signal.SIGXCPU}, Outcome.timeout, "CPU time limit exceeded"),
        ({"record": None, "status": signal.SIGSEGV, "output": "x"}, Outcome.crashed, "killed by SIGSEGV; output: x"),
        ({"record": None, "status": exited(0)}, Outcome.crashed, "exited with status 0 before the tests finished"),
        (
            {"record": None, "status": exited(SANDBOX_EXIT)},
            Outcome.sandbox_error,
            "the sandboxed child could not be set up",
        ),
        (
            {"record": None, "status": exited(1), "output": "MemoryError"},
            Outcome.memory,
            "exited with status 1 before the tests finished; output: MemoryError",
        ),
    ],
)
def test_classify(report: dict[str, object], outcome: Outcome, detail: str) -> None:
    result = classify({**report, "seconds": 0.5}, LIMITS)
    assert (result.outcome, result.detail, result.seconds) == (outcome, detail, 0.5)


def test_a_record_wins_over_the_way_the_child_ended() -> None:
    assert classify({"record": "P", "status": signal.SIGKILL, "stopped": "timeout"}, LIMITS).passed


def test_a_malformed_report_is_a_sandbox_error() -> None:
    assert classify({"nonsense": 1}, LIMITS).outcome is Outcome.sandbox_error


def test_the_fork_server_agrees_on_the_setup_failure_status() -> None:
    assert forkserver.SANDBOX_EXIT == SANDBOX_EXIT


def test_records_need_this_runs_nonce() -> None:
    nonce = b"a" * 32
    assert forkserver.parse_record(nonce + b"Fboom", nonce) == ("F", "boom")
    assert forkserver.parse_record(b"junk" + nonce + b"P" + nonce + b"F", nonce) == ("P", "")
    assert forkserver.parse_record(b"b" * 32 + b"P", nonce) == (None, "")
    assert forkserver.parse_record(nonce, nonce) == (None, "")
