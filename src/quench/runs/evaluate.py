"""Execute samples in the sandbox into a resumable `results.jsonl`, then summarise pass@k.

Each pass@k comes with its 95% interval, by a seeded bootstrap over problems (`quench.execution.
intervals`: 2,000 resamples, seed 0; with n > 1 samples the problems are resampled, not the samples).

MBPP+ samples (benchmark "mbpp+") get two verdicts: `passed` on MBPP's own inputs and
`passed_plus` on those and EvalPlus's extra inputs (quench.execution.plus); their summary
has `pass_plus_at_k` (pass+@k) beside `pass_at_k`, each with its interval.

A sample is scored against the problem of its `task_id` and, for samples that `quench robustness`
wrote, its `variant` ("nominal/full", "nominal/partial" or "transformation/seed"): the perturbed
problem, with its own prompt, entry point and tests (docs/robustness.md). The records of both files
are `quench.runs.records`' `SampleRecord` and `ResultRecord`.
"""

from __future__ import annotations

import hashlib
import logging
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence


from quench.datasets.problem import PLUS_BENCHMARK, Problem, iter_jsonl
from quench.errors import InputFileError, QuenchError
from quench.execution.outcomes import Outcome
from quench.execution.plus import PlusPool
from quench.execution.program_build import program_for
from quench.runs.records import ExecutionKey, ResultRecord, SampleRecord
from quench.runs.samples import JsonlAppender, repair_torn_tail
from quench.stats.intervals import BootstrapConfig, Interval, canonical, mean_intervals
from quench.stats.passk import mean_pass_at_k, pass_at_k_per_problem

log = logging.getLogger(__name__)

ProblemKey = tuple[str, str]  # (task_id, variant); variant "" for a problem of the benchmark itself


@dataclass(frozen=True)
class Summary:
    num_problems: int
    num_samples: int
    pass_at_k: dict[int, float]
    outcomes: dict[str, int]  # outcome name → count
    skipped: int = 0  # input lines left out with --skip-invalid
    by_variant: dict[str, "Summary"] = field(default_factory=dict)  # robustness samples: one per variant
    isolation: str = ""  # how programs ran: bwrap, rlimits or unconfined ("" when not known)
    unsafe_unconfined: bool = False  # the user allowed unconfined programs (--unsafe-unconfined)
    intervals: dict[int, Interval] = field(default_factory=dict)  # k → 95% bootstrap interval of pass@k
    pass_plus_at_k: dict[int, float] = field(default_factory=dict)  # MBPP+: pass+@k, base and extra inputs
    plus_intervals: dict[int, Interval] = field(default_factory=dict)  # k → 95% interval of pass+@k
    plus_overturned: int = 0  # MBPP+: samples that pass the base inputs and fail an extra one

    def to_json(self) -> dict:
        row = {
            "num_problems": self.num_problems,
            "num_samples": self.num_samples,
            "pass_at_k": {f"pass@{k}": v for k, v in self.pass_at_k.items()},
            "pass_at_k_intervals": {f"pass@{k}": i.to_json() for k, i in self.intervals.items()},
            "outcomes": self.outcomes,
            "skipped_lines": self.skipped,
        }
        if self.pass_plus_at_k:
            row["pass_plus_at_k"] = {f"pass+@{k}": v for k, v in self.pass_plus_at_k.items()}
            row["pass_plus_at_k_intervals"] = {f"pass+@{k}": i.to_json() for k, i in self.plus_intervals.items()}
            row["plus_overturned"] = self.plus_overturned
        if self.isolation:
            row["isolation"] = self.isolation
            row["unsafe_unconfined"] = self.unsafe_unconfined
        if self.by_variant:
            row["by_variant"] = {name: s.to_json() for name, s in self.by_variant.items()}
        return row


def result_records(path: Path, required: tuple[str, ...], resume: bool = False) -> list[ResultRecord]:
    """The result records of a run directory's log (`resume`: its torn tail mended first); a bad line
    fails with `file:line: reason`. A missing file holds no records."""
    if resume:
        repair_torn_tail(path)
    if not path.exists():
        return []
    records = []
    for number, row in iter_jsonl(path):
        missing = [name for name in required if name not in row]
        try:
            if missing:
                raise ValueError(f"missing field(s): {', '.join(missing)}")
            records.append(ResultRecord.from_json(row))
        except ValueError as err:
            raise InputFileError(str(path), number, str(err)) from None
    return records


def read_results(path: Path) -> list[ResultRecord]:
    """One record per sample: a sample re-executed on resume (it had a sandbox_error) keeps its last."""
    records = result_records(path, ("task_id", "sample_index", "outcome", "passed"))
    return list({(r.task_id, r.variant or "", r.sample_index): r for r in records}.values())


def problem_key(record: SampleRecord | ResultRecord) -> ProblemKey:
    return (str(record.task_id), record.variant or "")


def problems_by_key(problems: Iterable[Problem]) -> dict[ProblemKey, Problem]:
    """The benchmark's own problems, keyed as plain samples look them up."""
    return {(p.task_id, ""): p for p in problems}


def check_sample_tasks(samples: Sequence[SampleRecord], problems: Mapping[ProblemKey, Problem], source: str) -> None:
    unknown = sorted({problem_key(s) for s in samples} - problems.keys())
    if unknown:
        named = [f"{task} (variant {variant})" if variant else task for task, variant in unknown]
        shown = ", ".join(named[:5]) + (" …" if len(named) > 5 else "")
        raise QuenchError(f"{source}: unknown task id(s) for this benchmark: {shown}")


def execute_pending(
    jobs: Sequence[tuple[ExecutionKey, str]],
    pool,
    path: Path,
    on_result: Callable[[ResultRecord], None] | None = None,
    timeouts: Sequence[float | None] | None = None,
) -> list[ResultRecord]:
    """Run each (key, program) job whose key is not yet in `path`; append one record per result.

    Every job's key sets the same fields, and a record on disk matches a job on those. `timeouts`:
    each job's own wall-clock limit (None, or a None in it: the pool's). Returns one record per job:
    a record on disk that no job asks for (another input evaluated into the same directory) stays
    in the file but is not counted.
    """
    shape = jobs[0][0] if jobs else ExecutionKey()

    def key(record: ResultRecord) -> ExecutionKey:
        return record.key.within(shape)

    # A sandbox_error is the harness's failure, not the program's verdict: a resumed run executes it again.
    on_disk = {key(r): r for r in result_records(path, ("outcome", "passed"), resume=True)
               if r.outcome is not Outcome.sandbox_error}
    pending = [j for j, (job_key, _) in enumerate(jobs) if job_key not in on_disk]
    todo = [jobs[j] for j in pending]
    log.info("%d results on disk, %d programs to execute", len(on_disk), len(todo))
    items = ((i, program) for i, (_, program) in enumerate(todo))
    limits = {i: timeouts[j] for i, j in enumerate(pending) if timeouts[j]} if timeouts is not None else None
    out = JsonlAppender(path)
    try:
        for index, result in pool.imap(items, limits) if limits else pool.imap(items):
            record = ResultRecord.of(todo[index][0], result)
            out.write(record.to_json())
            on_disk[key(record)] = record
            if on_result:
                on_result(record)
    finally:
        out.close()
    return [on_disk[job_key] for job_key, _ in jobs]


def execute_samples(
    samples: Sequence[SampleRecord],
    problems: Mapping[ProblemKey, Problem],
    pool,
    path: Path,
    on_result: Callable[[ResultRecord], None] | None = None,
    limits: Mapping[str, float] | None = None,
) -> list[ResultRecord]:
    """Run every sample not yet in `path`; an empty completion is recorded as the sample's failure.
    A result is reused only for the same sample and the same program (`program_id`). `limits`:
    task_id -> its programs' wall-clock limit (quench.runs.calibration; a variant's is its task's)."""
    variants = any(s.variant is not None for s in samples)  # then every key has one ("" for plain samples)
    jobs = []
    for s in samples:
        program = program_for(problems[problem_key(s)], s.completion, s.solution)
        key = ExecutionKey(s.task_id, (s.variant or "") if variants else None, s.sample_index, program_id(program))
        jobs.append((key, program))
    if any(problems[problem_key(s)].benchmark == PLUS_BENCHMARK for s in samples):
        pool = PlusPool(pool)
    timeouts = [limits.get(s.task_id) for s in samples] if limits else None
    return execute_pending(jobs, pool, path, on_result, timeouts)


def program_id(program: str) -> str:
    return hashlib.sha256(program.encode()).hexdigest()[:20]


def score(results: Sequence[ResultRecord], ks: Sequence[int], skipped: int = 0) -> Summary:
    """pass@k over problems; a k is reported only when every problem has at least k samples."""
    per_problem: dict[ProblemKey, list[bool]] = defaultdict(list)
    outcomes: dict[str, int] = defaultdict(int)
    for r in results:
        per_problem[problem_key(r)].append(r.passed)
        outcomes[r.outcome.value] += 1
        outcomes["flaky_timeout"] += r.flaky_timeout  # beside its outcome: "timeout" counts confirmed ones
    counted = {name: count for name, count in sorted(outcomes.items()) if count}
    counts = [(len(v), sum(v)) for v in canonical(per_problem)]  # canonical: the interval ignores file order
    means = mean_pass_at_k(counts, ks)
    summary = Summary(len(per_problem), len(results), means, counted, skipped,
                      intervals=pass_at_k_intervals(counts, list(means)))
    return with_plus(summary, results, ks) if results and all(r.passed_plus is not None for r in results) else summary


def with_plus(summary: Summary, results: Sequence[ResultRecord], ks: Sequence[int]) -> Summary:
    """`summary` with pass+@k (MBPP+'s base and extra inputs) and the base passes they overturn."""
    per_problem: dict[ProblemKey, list[bool]] = defaultdict(list)
    for r in results:
        per_problem[problem_key(r)].append(bool(r.passed_plus))
    counts = [(len(v), sum(v)) for v in canonical(per_problem)]
    means = mean_pass_at_k(counts, ks)
    overturned = sum(1 for r in results if r.passed and not r.passed_plus)
    return replace(summary, pass_plus_at_k=means, plus_intervals=pass_at_k_intervals(counts, list(means)),
                   plus_overturned=overturned)


def pass_at_k_intervals(
    counts: Sequence[tuple[int, int]], ks: Sequence[int], config: BootstrapConfig = BootstrapConfig()
) -> dict[int, Interval]:
    """k → the 95% interval of mean pass@k, problems resampled together for every k."""
    if not counts or not ks:
        return {}
    import numpy as np  # here, not at import: the CLI's --help loads this module

    values = np.array([pass_at_k_per_problem(counts, k) for k in ks]).T  # (problems, len(ks))
    return dict(zip(ks, mean_intervals(values, config)))


def summarize(results: Sequence[ResultRecord], ks: Sequence[int] = (1, 10, 100), skipped: int = 0) -> Summary:
    """pass@k over all problems (a (task, variant) pair each), and per variant where samples have one."""
    summary = score(results, ks, skipped)
    variants = sorted({r.variant for r in results if r.variant})
    return replace(summary, by_variant={v: score([r for r in results if r.variant == v], ks) for v in variants})
