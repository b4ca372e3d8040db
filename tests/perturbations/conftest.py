"""Small problems shared by the perturbation tests (tests/helpers.py has the tiny models)."""

from __future__ import annotations

import subprocess
import sys
from typing import Sequence

import pytest

from quench.datasets import Problem

PROMPT = '''def count_words(text_line, max_count):
    """Return the number of words in `text_line` that are longer than max_count.
    It splits the text on "single spaces" and is case-sensitive.
    >>> count_words("a bb ccc", 1)
    2
    """
    words = text_line.split(' ')
    total = 0
'''
SOLUTION = '''    for word in words:
        if len(word) > max_count:
            total += 1
    return total
'''
TEST = '''def check(candidate):
    assert candidate('a bb ccc', 1) == 2
    assert candidate('', 0) == 0
    assert candidate('hello world foo', 3) == 2
'''


@pytest.fixture
def problem() -> Problem:
    """A full-prompt problem whose reference body has 5 lines (partial split after 2)."""
    head, rest = PROMPT.split("    words =")
    return Problem("Test/0", head, "    words =" + rest + SOLUTION, TEST, "count_words", "test")


class LocalRunner:
    """Runs programs with plain `python -c` (no sandbox): for tests that must not depend on bwrap."""

    def run_many(self, programs: Sequence[str]) -> list:
        from quench.execution import ExecutionResult, Outcome

        out = []
        for program in programs:
            proc = subprocess.run([sys.executable, "-c", program], capture_output=True, timeout=30)
            out.append(ExecutionResult(Outcome.passed if proc.returncode == 0 else Outcome.failed))
        return out


@pytest.fixture
def runner() -> LocalRunner:
    return LocalRunner()
