"""The MBPP+ test runner that each sandboxed program carries (its source is embedded, see plus.py).

Glossary:
- input: one argument list; expected: what the reference returned for it (computed outside the
  program, see plus.py); limit: the input's time limit in seconds.
- stage: "base" (MBPP's own inputs) or "plus" (EvalPlus's extra inputs); base runs first.

Comparison (EvalPlus's rules): equal outputs pass; otherwise, where the expected output is a float
or a flat list/tuple of floats, or the problem has an `atol`, the output must have the expected
type and length and be close elementwise (|out - exp| <= atol + 1e-7 |exp|, atol at least 1e-6
for floats), as `np.allclose` with `rtol=1e-07`. Only standard-library code: it runs before and
beside the program under test, and must not depend on what the sandbox lets it import.
The first failing input ends the run (EvalPlus's fast check) with `BaseTestFailed` or
`PlusTestFailed`, whose message says why: `wrong`, `error` or `timed out`.
"""

import base64
import math
import pickle
import signal

FLOAT_ATOL = 1e-6  # EvalPlus's atol for float outputs of problems that give none
RTOL = 1e-7  # np.testing.assert_allclose's default, which EvalPlus keeps


class BaseTestFailed(AssertionError):
    """An input of MBPP's own tests failed."""


class PlusTestFailed(AssertionError):
    """Every base input passed; an extra (plus) input failed."""


class InputTimedOut(Exception):
    """Raised by the alarm when an input runs past its limit."""


def is_floats(value):
    if isinstance(value, float):
        return True
    if isinstance(value, (list, tuple)) and value:
        return all(isinstance(item, float) for item in value)
    return False


def close(out, expected, atol):
    """np.allclose(out, expected, rtol=1e-07, atol=atol) on numbers and nested sequences."""
    if isinstance(expected, (list, tuple)):
        return (isinstance(out, (list, tuple)) and len(out) == len(expected)
                and all(close(o, e, atol) for o, e in zip(out, expected)))
    if not isinstance(out, (int, float)) or not isinstance(expected, (int, float)):
        return False
    if math.isinf(expected) or math.isinf(out):
        return out == expected
    return abs(out - expected) <= atol + RTOL * abs(expected)


def matches(out, expected, atol, oracle="exact"):
    """Whether `out` passes for an input whose reference output is `expected`."""
    if oracle == "any":  # Mbpp/164: EvalPlus accepts every output (the task is ill-posed)
        return True
    if oracle == "not_none":  # the reference returns a match object or None: only that is compared
        return expected == (out is not None)
    try:
        if out == expected or (oracle == "zero_ok" and out == 0):  # Mbpp/295 also accepts 0
            return True
    except Exception:
        return False
    if atol == 0 and is_floats(expected):
        atol = FLOAT_ATOL
    if atol == 0:
        return False
    return type(out) is type(expected) and close(out, expected, atol)


def _alarm(signum, frame):
    raise InputTimedOut()


def run_one(candidate, args, expected, limit, atol, oracle):
    """None if the input passes, else why not ("wrong", "timed out after …", "error: …")."""
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        out = candidate(*args)
    except InputTimedOut:
        return f"timed out after {limit:g} s"
    except BaseException as exc:  # SystemExit and KeyboardInterrupt too: the input failed
        return f"error: {type(exc).__name__}: {str(exc)[:100]}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    try:
        return None if matches(out, expected, atol, oracle) else f"wrong: got {repr(out)[:80]}"
    except Exception as exc:
        return f"wrong: comparing raised {type(exc).__name__}"


def run_tests(candidate, blob, stages):
    """Run every input of `stages` (in order) against the expected outputs packed in `blob`."""
    tests = pickle.loads(base64.b85decode(blob))
    signal.signal(signal.SIGALRM, _alarm)
    for stage in stages:
        failure = BaseTestFailed if stage == "base" else PlusTestFailed
        cases = tests[stage]
        for index, (args, expected, limit) in enumerate(cases):
            why = run_one(candidate, args, expected, limit, tests["atol"], tests["oracle"])
            if why is not None:
                raise failure(f"{stage} input {index + 1} of {len(cases)} {why}")
