"""benchmarks/native_revisions.py refuses bad input with one error line and exit 2, before it builds or loads."""

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "native_revisions.py"


@pytest.mark.parametrize("flags, message", [
    (["--base", "no-such-revision-of-quench"], "error: --base no-such-revision-of-quench:"),
    (["--rounds", "0"], "error: --rounds must be at least 1, got 0"),
    (["--batch-size", "-2"], "error: --batch-size must be at least 1, got -2"),
])
def test_bad_input_is_one_error_line_and_exit_2(flags, message):
    done = subprocess.run([sys.executable, str(SCRIPT), *flags], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-500:]
    assert message in done.stderr.strip().splitlines()[-1]
