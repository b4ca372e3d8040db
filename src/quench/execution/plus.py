"""MBPP+ execution: programs that judge a sample on its problem's inputs, and two verdicts per program.

Glossary:
- oracle: a problem's expected outputs and the reference's time per input (plus_oracle.py).
- time limit of an input: max(MIN_LIMIT_S, FACTOR x the reference's time), EvalPlus's rule.
- verdicts: `base` (MBPP's own inputs) and `plus` (base and EvalPlus's extra inputs together).

A program is the judge (plus_harness.py, with plus_values.py and plus_rules.py before it) and the
sample's text as a string: the judge runs the sample in a fresh interpreter of its own
(plus_runner.py), one per stage, sends it the inputs, and compares the plain values it returns
with the expected outputs, which only the judge holds; large ones only as digests. The judge
reports the first failing input. A judge that is itself killed (the wall clock, or a sample that
signals it) has no verdict: its base verdict comes from a second, base-only run. An input that
times out is run again once, with its whole program, as the pool re-runs a program that does.
"""

from __future__ import annotations

import base64
import functools
import pickle
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Hashable, Iterable, Iterator, Mapping, Sequence, TypeVar

from quench.datasets.mbppplus import PlusTask, plus_task
from quench.datasets.problem import Problem
from quench.execution.outcomes import ExecutionResult, Outcome
from quench.execution.plus_oracle import Oracle, cache_dir, oracle_for, oracle_path, prepare_oracles
from quench.execution.plus_rules import rule_of
from quench.execution.sandbox import SandboxLimits, without_quench_imports

__all__ = ["PlusPool", "PlusResult", "cache_dir", "oracle_for", "plus_program", "prepare_oracles", "prepared_limits",
           "sandbox_limits", "time_limits"]

K = TypeVar("K", bound=Hashable)
MIN_LIMIT_S = 1.0  # EvalPlus's floor on an input's time limit
FACTOR = 4.0  # EvalPlus's gt_time_limit_factor: a correct program may be this much slower than the reference
STAGE_START_S = 2.0  # a stage's fresh interpreter and the sample's own top-level code, in a program's budget
STAGES = ("base", "plus")
JUDGE_PARTS = ("plus_values.py", "plus_rules.py", "plus_harness.py")  # one script, in this order
RUNNER_PARTS = ("plus_values.py", "plus_runner.py")
FAILURES = ("BaseTestFailed:", "PlusTestFailed:")


def time_limits(seconds: Sequence[float]) -> list[float]:
    return [max(MIN_LIMIT_S, FACTOR * t) for t in seconds]


def program_budget(task_id: str, directory: Path | None = None) -> float:
    """Seconds a program of this task may take to run every input at its limit (plus one)."""
    oracle = oracle_for(plus_task(task_id), directory)
    return sum(time_limits(oracle.base_seconds)) + sum(time_limits(oracle.plus_seconds)) + 1.0 + 2 * STAGE_START_S


def prepared_limits(limits: SandboxLimits, task_ids: Sequence[str], workers: int = 1) -> SandboxLimits:
    """Compute the oracles the cache lacks (with a progress bar), then `sandbox_limits`."""
    from tqdm import tqdm

    missing = [t for t in dict.fromkeys(task_ids) if not oracle_path(plus_task(t), cache_dir()).is_file()]
    if missing:
        with tqdm(total=len(missing), desc="MBPP+ expected outputs", unit="problem", dynamic_ncols=True) as bar:
            prepare_oracles(missing, workers, on_done=lambda _: bar.update(1))
    return sandbox_limits(limits, task_ids)


def sandbox_limits(limits: SandboxLimits, task_ids: Iterable[str]) -> SandboxLimits:
    """`limits` with a wall clock long enough for the slowest task's program (the inputs' own
    limits stop a slow program first; the wall clock stops only what they cannot interrupt)."""
    longest = max((program_budget(t) for t in task_ids), default=0.0)
    return limits if longest <= limits.timeout_s else SandboxLimits(**{**limits.__dict__, "timeout_s": longest})


def _script(parts: Sequence[str]) -> str:
    here = Path(__file__).parent
    return "\n".join(without_quench_imports((here / name).read_text(encoding="utf-8")) for name in parts)


@functools.cache
def judge_source() -> str:
    """The judge's script, with the runner's script as its RUNNER."""
    return f"{_script(JUDGE_PARTS)}\nRUNNER = {_script(RUNNER_PARTS)!r}\n"


@functools.lru_cache(maxsize=64)
def _tests_blob(task_id: str, directory: Path) -> str:
    """One task's blob, reused by its samples (a robustness run builds thousands of programs per task)."""
    task = plus_task(task_id)
    return tests_blob(task, oracle_for(task, directory))


def tests_blob(task: PlusTask, oracle: Oracle) -> str:
    """Inputs, expected entries and limits of both stages and the task's rule, pickled (the judge unpacks them)."""
    tests = {
        "base": list(zip(task.base_inputs, oracle.base, time_limits(oracle.base_seconds))),
        "plus": list(zip(task.plus_inputs, oracle.plus, time_limits(oracle.plus_seconds))),
        "atol": task.atol,
        "rule": rule_of(task.entry_point),
    }
    return base64.b85encode(pickle.dumps(tests)).decode("ascii")


def plus_program(problem: Problem, completion: str, stages: Sequence[str] = STAGES) -> str:
    """The judge of the sample `problem.prompt + completion` on the problem's inputs.

    The tests are the MBPP+ problem of `problem.task_id` whatever the prompt (a perturbed variant
    keeps its problem's inputs and expected outputs); the candidate is `problem.entry_point`. A
    sample that does not compile is the program itself, so that it is reported as a syntax error.
    """
    source = f"{problem.prompt}{completion}"
    try:
        with warnings.catch_warnings():  # a sample's invalid escapes are its own business, not the caller's
            warnings.simplefilter("ignore")
            compile(source, "<program>", "exec")
    except (SyntaxError, ValueError):
        return source
    blob = _tests_blob(problem.task_id, cache_dir())
    return (f"__quench_plus__ = {{'__name__': '__quench_plus__'}}\n"
            f"exec({judge_source()!r}, __quench_plus__)\n"
            f"__quench_plus__['run_tests']({source!r}, {problem.entry_point!r}, __quench_plus__['RUNNER'], "
            f"{blob!r}, {tuple(stages)!r})\n")


def base_only(program: str) -> str:
    """The same program, run on the base inputs alone."""
    head, tail = program.rsplit(repr(STAGES), 1)
    return head + repr(("base",)) + tail


@dataclass(frozen=True)
class PlusResult:
    """One program's two verdicts: `base` on MBPP's inputs, `plus` on base and extra inputs."""

    base: ExecutionResult
    plus: ExecutionResult

    # the base verdict stands in for the program where a generic consumer reads one result
    @property
    def outcome(self) -> Outcome:
        return self.base.outcome

    @property
    def passed(self) -> bool:
        return self.base.passed

    @property
    def detail(self) -> str:
        return self.plus.detail

    @property
    def seconds(self) -> float:
        return self.plus.seconds

    @property
    def flaky_timeout(self) -> bool:
        return self.base.flaky_timeout or self.plus.flaky_timeout


def harness_result(result: ExecutionResult) -> ExecutionResult:
    """A judge's failure that says `timed out` is a timeout, one that says `returned a non-builtin
    value` is lying_value; anything else stays as it is."""
    if result.outcome is Outcome.failed and result.detail.startswith(FAILURES):
        if " timed out after " in result.detail:
            return replace(result, outcome=Outcome.timeout)
        if " returned a non-builtin value " in result.detail:
            return replace(result, outcome=Outcome.lying_value)
    return result


def has_verdict(result: ExecutionResult) -> bool:
    """Whether the run settled the base verdict itself (it ended, or the judge reported)."""
    return result.outcome in (Outcome.passed, Outcome.failed, Outcome.syntax_error) or \
        result.detail.startswith(FAILURES)


def split_verdicts(full: ExecutionResult) -> PlusResult:
    """Both verdicts from one run that has them (`has_verdict`)."""
    plus = harness_result(full)
    if full.passed or full.detail.startswith("PlusTestFailed:"):
        return PlusResult(ExecutionResult(Outcome.passed, "", full.seconds, full.flaky_timeout), plus)
    return PlusResult(plus, plus)


def input_timed_out(result: PlusResult) -> bool:
    """Whether the judge stopped the program at an input's time limit (not the pool's wall clock)."""
    return result.plus.outcome is Outcome.timeout and result.plus.detail.startswith(FAILURES)


def flaky(result: PlusResult) -> PlusResult:
    """A re-run's verdicts, marked: the first run timed out on an input and this one did not."""
    return PlusResult(replace(result.base, flaky_timeout=True), replace(result.plus, flaky_timeout=True))


class PlusPool:
    """A pool's `imap` for MBPP+ programs: yields `PlusResult`s (a base-only run where the judge was
    killed; one more run where an input timed out, as the pool does for a program's wall clock)."""

    def __init__(self, pool) -> None:
        self.pool = pool
        self.isolation = getattr(pool, "isolation", "")
        limits = getattr(pool, "limits", None)
        self.retries = limits.timeout_retries if limits is not None else 1

    def imap(self, items: Iterable[tuple[K, str]], timeouts: Mapping[K, float] | None = None) -> Iterator[tuple[K, PlusResult]]:
        """`timeouts`: a key's own wall-clock limit, for its run and its re-runs."""
        programs: dict[K, str] = {}
        timed_out: list[K] = []
        for key, result in self._verdicts(items, programs, timeouts):
            if input_timed_out(result) and self.retries:
                timed_out.append(key)
            else:
                programs.pop(key, None)
                yield key, result
        again = ((key, programs[key]) for key in timed_out)
        for key, result in self._verdicts(again, {}, timeouts):
            yield key, result if input_timed_out(result) else flaky(result)

    def _verdicts(self, items: Iterable[tuple[K, str]], programs: dict[K, str],
                  timeouts: Mapping[K, float] | None) -> Iterator[tuple[K, PlusResult]]:
        """Both verdicts of each program; `programs` keeps each program's text until the caller drops it."""
        killed: dict[K, ExecutionResult] = {}

        def remember() -> Iterator[tuple[K, str]]:
            for key, program in items:
                programs[key] = program
                yield key, program

        for key, result in self.pool.imap(remember(), timeouts):
            if has_verdict(result):
                yield key, split_verdicts(result)
            else:
                killed[key] = result
        reruns = ((key, base_only(programs[key])) for key in killed)
        for key, base in self.pool.imap(reruns, timeouts):
            yield key, PlusResult(harness_result(base), killed[key])
