"""MBPP+ execution: expected outputs from the reference, one sandboxed process per program, two verdicts.

Glossary:
- oracle: a problem's expected outputs and the reference's time per input, computed once by
  running the reference solution on every input and cached under `cache_dir()` by the problem's
  content hash (`PlusTask.digest`) and the Python version.
- time limit of an input: max(MIN_LIMIT_S, FACTOR x the reference's time), EvalPlus's rule.
- verdicts: `base` (MBPP's own inputs) and `plus` (base and EvalPlus's extra inputs together).

The reference solutions ship with quench (package data, like EvalPlus's `trusted_exec` treats
them), and the sandbox pool returns an outcome and a short detail, not values; so the oracle runs
in a separate interpreter (`-s`, no user site) under the sandbox's environment (the same hash seed,
hence the same set order) and address-space limit, and programs under test run in the sandbox.
A program carries its inputs, expected outputs and limits, runs base then plus inputs, and stops at
the first failure (plus_harness.py). A program killed outright (a hang in C code, `os._exit`) has
no verdict of its own: its base verdict comes from a second, base-only run.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.resources
import os
import pickle
import platform
import resource
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Hashable, Iterable, Iterator, Mapping, Sequence, TypeVar

from quench.datasets.mbppplus import PlusTask, plus_task
from quench.datasets.problem import Problem
from quench.errors import QuenchError
from quench.execution.outcomes import ExecutionResult, Outcome
from quench.execution.sandbox import WORKER_ENV, SandboxLimits, python_executable

K = TypeVar("K", bound=Hashable)
MIN_LIMIT_S = 1.0  # EvalPlus's floor on an input's time limit
FACTOR = 4.0  # EvalPlus's gt_time_limit_factor: a correct program may be this much slower than the reference
STAGES = ("base", "plus")
# EvalPlus's special oracles, by entry point (evalplus/eval/__init__.py)
ORACLES = {"are_equivalent": "any", "sum_div": "zero_ok",
           "check_str": "not_none", "text_match_three": "not_none", "text_starta_endb": "not_none"}
CACHE_VERSION = "1"  # bump when the oracle's contents change
ORACLE_MEMORY_MB = 4096  # EvalPlus's 4 GB for the reference

ORACLE_SCRIPT = """
import copy, pickle, sys, time
reference, entry_point, inputs, not_none = pickle.load(sys.stdin.buffer)
namespace = {"__name__": "__reference__"}
exec(compile(reference, "<reference>", "exec"), namespace)
function = namespace[entry_point]
outputs, seconds = [], []
for args in inputs:
    args = copy.deepcopy(args)
    start = time.perf_counter()
    out = function(*args)
    seconds.append(time.perf_counter() - start)
    outputs.append(out is not None if not_none else out)
sys.stdout.buffer.write(pickle.dumps((outputs, seconds)))
"""


@dataclass(frozen=True)
class Oracle:
    """Expected outputs and the reference's seconds per input, for base and plus inputs."""

    base: list
    plus: list
    base_seconds: list[float]
    plus_seconds: list[float]


def cache_dir() -> Path:
    """$QUENCH_CACHE/mbppplus, else $XDG_CACHE_HOME/quench/mbppplus (default ~/.cache)."""
    root = os.environ.get("QUENCH_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "quench"
    return Path(root) / "mbppplus"


def oracle_path(task: PlusTask, directory: Path) -> Path:
    key = f"{task.digest}-py{platform.python_version()}-v{CACHE_VERSION}"
    return directory / f"{task.task_id.replace('/', '_')}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.pkl"


def oracle_for(task: PlusTask, directory: Path | None = None) -> Oracle:
    """The cached oracle of `task`, computed now if the cache has none."""
    path = oracle_path(task, directory or cache_dir())
    if path.is_file():
        try:
            return pickle.loads(path.read_bytes())
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError):
            pass  # a torn or stale file: compute it again
    oracle = compute_oracle(task)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    partial.write_bytes(pickle.dumps(oracle))
    partial.replace(path)
    return oracle


def _limit_memory() -> None:
    size = ORACLE_MEMORY_MB * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (size, size))


def compute_oracle(task: PlusTask) -> Oracle:
    """Run the reference on every input in a separate interpreter; QuenchError if it fails."""
    inputs = [*task.base_inputs, *task.plus_inputs]
    request = pickle.dumps((task.reference, task.entry_point, inputs, ORACLES.get(task.entry_point) == "not_none"))
    done = subprocess.run([python_executable(), "-s", "-c", ORACLE_SCRIPT], input=request, capture_output=True,
                          env=dict(WORKER_ENV), cwd="/", preexec_fn=_limit_memory, check=False)
    if done.returncode != 0:
        tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        raise QuenchError(f"{task.task_id}: the reference solution failed on its inputs: {tail[0]}")
    outputs, seconds = pickle.loads(done.stdout)
    n = len(task.base_inputs)
    return Oracle(outputs[:n], outputs[n:], seconds[:n], seconds[n:])


def prepare_oracles(task_ids: Sequence[str], workers: int = 1, on_done: Callable[[str], None] | None = None,
                    directory: Path | None = None) -> None:
    """Compute the oracles the cache lacks, `workers` at a time (the slowest reference takes a minute)."""
    def one(task_id: str) -> None:
        oracle_for(plus_task(task_id), directory)
        if on_done:
            on_done(task_id)

    with ThreadPoolExecutor(max(1, workers)) as threads:
        list(threads.map(one, task_ids))


def time_limits(seconds: Sequence[float]) -> list[float]:
    return [max(MIN_LIMIT_S, FACTOR * t) for t in seconds]


def program_budget(task_id: str, directory: Path | None = None) -> float:
    """Seconds a program of this task may take to run every input at its limit (plus one)."""
    oracle = oracle_for(plus_task(task_id), directory)
    return sum(time_limits(oracle.base_seconds)) + sum(time_limits(oracle.plus_seconds)) + 1.0


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


@functools.cache
def _harness_source() -> str:
    return (importlib.resources.files("quench.execution") / "plus_harness.py").read_text(encoding="utf-8")


@functools.lru_cache(maxsize=64)
def _tests_blob(task_id: str, directory: Path) -> str:
    """One task's blob, reused by its samples (a robustness run builds thousands of programs per task)."""
    task = plus_task(task_id)
    return tests_blob(task, oracle_for(task, directory))


def tests_blob(task: PlusTask, oracle: Oracle) -> str:
    """Inputs, expected outputs and limits of both stages, pickled (the program unpacks them)."""
    tests = {
        "base": list(zip(task.base_inputs, oracle.base, time_limits(oracle.base_seconds))),
        "plus": list(zip(task.plus_inputs, oracle.plus, time_limits(oracle.plus_seconds))),
        "atol": task.atol,
        "oracle": ORACLES.get(task.entry_point, "exact"),
    }
    return base64.b85encode(pickle.dumps(tests)).decode("ascii")


def plus_program(problem: Problem, completion: str, stages: Sequence[str] = STAGES) -> str:
    """The sample's code, then the harness in a namespace of its own, run on the problem's inputs.

    The tests are the MBPP+ problem of `problem.task_id` whatever the prompt (a perturbed variant
    keeps its problem's inputs and expected outputs); the candidate is `problem.entry_point`.
    """
    blob = _tests_blob(problem.task_id, cache_dir())
    return (f"{problem.prompt}{completion}\n\n\n"
            f"__quench_plus__ = {{'__name__': '__quench_plus__'}}\n"
            f"exec({_harness_source()!r}, __quench_plus__)\n"
            f"__quench_plus__['run_tests']({problem.entry_point}, {blob!r}, {tuple(stages)!r})\n")


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


def harness_result(result: ExecutionResult) -> ExecutionResult:
    """A harness failure that says `timed out` is a timeout; anything else stays as it is."""
    if result.outcome is Outcome.failed and result.detail.startswith(("BaseTestFailed:", "PlusTestFailed:")) \
            and " timed out after " in result.detail:
        return ExecutionResult(Outcome.timeout, result.detail, result.seconds)
    return result


def has_verdict(result: ExecutionResult) -> bool:
    """Whether the run settled the base verdict itself (it ended, or the harness reported)."""
    return result.outcome in (Outcome.passed, Outcome.failed, Outcome.syntax_error) or \
        result.detail.startswith(("BaseTestFailed:", "PlusTestFailed:"))


def split_verdicts(full: ExecutionResult) -> PlusResult:
    """Both verdicts from one run that has them (`has_verdict`)."""
    plus = harness_result(full)
    if full.passed or full.detail.startswith("PlusTestFailed:"):
        return PlusResult(ExecutionResult(Outcome.passed, "", full.seconds), plus)
    return PlusResult(plus, plus)


class PlusPool:
    """A pool's `imap` for MBPP+ programs: yields `PlusResult`s (a base-only rerun where needed)."""

    def __init__(self, pool) -> None:
        self.pool = pool
        self.isolation = getattr(pool, "isolation", "")

    def imap(self, items: Iterable[tuple[K, str]], timeouts: Mapping[K, float] | None = None) -> Iterator[tuple[K, PlusResult]]:
        """`timeouts`: a key's own wall-clock limit, for its run and its base-only rerun."""
        programs: dict[K, str] = {}
        killed: dict[K, ExecutionResult] = {}

        def remember() -> Iterator[tuple[K, str]]:
            for key, program in items:
                programs[key] = program
                yield key, program

        for key, result in self.pool.imap(remember(), timeouts):
            if has_verdict(result):
                programs.pop(key)
                yield key, split_verdicts(result)
            else:
                killed[key] = result
        reruns = ((key, base_only(programs[key])) for key in killed)
        for key, base in self.pool.imap(reruns, timeouts):
            yield key, PlusResult(harness_result(base), killed[key])
