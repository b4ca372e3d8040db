"""`quench run --time-budget`: sample each prompt until its budget is spent (BASS §5).

A problem's samples are written together once its budget ends, so after a kill a problem is either
complete on disk (skipped on restart) or absent (sampled again with a fresh budget): never half.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Callable, Sequence

from quench.datasets.problem import Problem
from quench.runs.budget import sample_within_budget
from quench.runs.records import ResultRecord, SampleRecord
from quench.runs.samples import JsonlAppender, resume_samples, sample_record
from quench.engine.types import GenerationRequest, SamplingParams

log = logging.getLogger(__name__)


def generate_within_budget(
    problems: Sequence[Problem],
    backend,
    encode: Callable[[str], tuple[int, ...]],
    sampling: SamplingParams,
    stop_sequences: tuple[str, ...],
    prompt_format: str,
    budget_s: float,
    path: Path,
    on_problem: Callable[[list[SampleRecord]], None] | None = None,
) -> list[SampleRecord]:
    records = resume_samples(path)
    done = {r.task_id for r in records}
    out = JsonlAppender(path)
    try:
        for problem in problems:
            if problem.task_id in done:
                continue
            request = GenerationRequest(problem.task_id, encode(problem.prompt), 1, stop_sequences)
            results = sample_within_budget(backend, request, sampling, budget_s)
            batch = [finished_sample(sample_record(problem, result, prompt_format), i) for i, result in enumerate(results)]
            if not batch:  # nothing finished within the budget: record the miss so it is not retried
                batch = [SampleRecord(problem.task_id, 0, "", "", raw="", finish_reason="budget", num_tokens=0,
                                      extra={"finish_s": None})]
            out.write_many([record.to_json() for record in batch])
            records.extend(batch)
            if on_problem:
                on_problem(batch)
    finally:
        out.close()
    return records


def finished_sample(record: SampleRecord, index: int) -> SampleRecord:
    """A sample numbered in finishing order, its time from the budget's start rounded like its seconds."""
    return replace(record, sample_index=index, extra={**record.extra, "finish_s": round(float(record.extra["finish_s"]), 4)})


def pass_first_and_all(samples: Sequence[SampleRecord], results: Sequence[ResultRecord]) -> dict[str, float]:
    """Pass@First (the first finished sample passes) and Pass@All (any finished sample passes)."""
    passed = {(r.task_id, r.sample_index): r.passed for r in results}
    by_task: dict[str, list[SampleRecord]] = defaultdict(list)
    for s in samples:
        by_task[s.task_id].append(s)
    first = every = 0
    for task, rows in by_task.items():
        finished = sorted((r for r in rows if r.finish_s is not None), key=lambda r: r.finish_s or 0.0)
        outcomes = [passed[(task, r.sample_index)] for r in finished]
        first += bool(outcomes) and outcomes[0]
        every += any(outcomes)
    total = len(by_task)
    return {"pass@first": first / total if total else 0.0, "pass@all": every / total if total else 0.0,
            "mean_samples": sum(len(v) for v in by_task.values()) / total if total else 0.0}
