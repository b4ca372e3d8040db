"""Execute samples in the sandbox into a resumable `results.jsonl`, then summarise pass@k."""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from quench.datasets.problem import Problem
from quench.errors import QuenchError
from quench.execution.passk import mean_pass_at_k
from quench.execution.sanitize import program_for
from quench.runs.samples import JsonlAppender, read_jsonl_records

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Summary:
    num_problems: int
    num_samples: int
    pass_at_k: dict[int, float]
    outcomes: dict[str, int]  # outcome name → count

    def to_json(self) -> dict:
        return {
            "num_problems": self.num_problems,
            "num_samples": self.num_samples,
            "pass_at_k": {f"pass@{k}": v for k, v in self.pass_at_k.items()},
            "outcomes": self.outcomes,
        }


def read_results(path: Path) -> list[dict]:
    return read_jsonl_records(path, ("task_id", "sample_index", "outcome", "passed"))


def check_sample_tasks(samples: Sequence[dict], problems: dict[str, Problem], source: str) -> None:
    unknown = sorted({s["task_id"] for s in samples} - problems.keys())
    if unknown:
        shown = ", ".join(unknown[:5]) + (" …" if len(unknown) > 5 else "")
        raise QuenchError(f"{source}: unknown task id(s) for this benchmark: {shown}")


def result_record(fields: dict, result) -> dict:
    return {
        **fields,
        "outcome": str(result.outcome.value),
        "passed": bool(result.passed),
        "detail": result.detail[-500:],
        "seconds": round(result.seconds, 4),
    }


def execute_pending(
    jobs: Sequence[tuple[dict, str]],
    key_fields: tuple[str, ...],
    pool,
    path: Path,
    on_result: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Run each (fields, program) job whose key is not yet in `path`; append one record per result."""
    results = read_jsonl_records(path, (*key_fields, "outcome", "passed"))
    done = {tuple(r[f] for f in key_fields) for r in results}
    todo = [(fields, program) for fields, program in jobs if tuple(fields[f] for f in key_fields) not in done]
    log.info("%d results on disk, %d programs to execute", len(done), len(todo))
    out = JsonlAppender(path)
    try:
        for index, result in pool.imap((i, program) for i, (_, program) in enumerate(todo)):
            record = result_record(todo[index][0], result)
            out.write(record)
            results.append(record)
            if on_result:
                on_result(record)
    finally:
        out.close()
    return results


def execute_samples(
    samples: Sequence[dict],
    problems: dict[str, Problem],
    pool,
    path: Path,
    on_result: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Run every sample not yet in `path`; an empty completion is recorded as the sample's failure."""
    jobs = [
        ({"task_id": s["task_id"], "sample_index": s["sample_index"]},
         program_for(problems[s["task_id"]], s["completion"], s.get("solution", "")))
        for s in samples
    ]
    return execute_pending(jobs, ("task_id", "sample_index"), pool, path, on_result)


def summarize(results: Sequence[dict], ks: Sequence[int] = (1, 10, 100)) -> Summary:
    """pass@k over problems; a k is reported only when every problem has at least k samples."""
    per_task: dict[str, list[bool]] = defaultdict(list)
    outcomes: dict[str, int] = defaultdict(int)
    for r in results:
        per_task[r["task_id"]].append(bool(r["passed"]))
        outcomes[r["outcome"]] += 1
    counts = [(len(v), sum(v)) for v in per_task.values()]
    return Summary(len(per_task), len(results), mean_pass_at_k(counts, ks), dict(sorted(outcomes.items())))
