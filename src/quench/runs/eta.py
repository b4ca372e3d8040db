"""How long a generation run has left: an estimate from sample latencies that counts the rows in flight.

Counting finished samples per second (tqdm's ETA) is biased early in a continuously batched run:
short answers finish first and free their slot, long ones (answers that run to the token limit)
hold theirs, so the first finished samples are a sample of the short ones. This estimator works in
slot-seconds instead:

- every sample occupies a slot from its start to its finish (its latency, `seconds` in a record);
- the expected latency of a sample comes from a Kaplan–Meier estimate over the finished samples
  (observed) and the rows still running (censored at their age: their latency is at least that);
- a row still running past the longest finished answer runs to the token limit (its latency is
  taken as the longest answer that hit the limit, or the limit times the median seconds per token);
- remaining slot-seconds (the in-flight rows' expected rest plus the unstarted samples' expected
  latency) divided by the slots the run kept busy so far (slot-seconds spent / wall seconds,
  Little's law) is the generation time left.

The engine reports when a row starts (`QuenchBackend.generate(on_start=...)`); a backend that does
not (Hugging Face `generate`, Ray actors) gets the estimate from finished samples alone.
"""

from __future__ import annotations

import bisect
import heapq
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np

from quench.engine.types import GenerationRequest, SamplingParams
from quench.execution.sandbox import SandboxLimits
from quench.runs.records import SampleRecord

SampleId = tuple[str, int]  # (request key, sample index)


@dataclass(frozen=True)
class Survival:
    """A Kaplan–Meier survival curve of latency: S = `levels[i]` on [`times[i]`, `times[i + 1]`), `levels[-1]` up to `cap`."""

    times: np.ndarray  # (k + 1,) 0 then each distinct observed latency, ascending
    levels: np.ndarray  # (k + 1,) S just after each time (levels[0] = 1)
    cap: float  # where the curve drops to 0: the latency of an answer that runs to the token limit

    def mean_rest(self, age: float) -> float:
        """E[L − age | L > age]: seconds a row of this age still has to run (Kaplan–Meier, Section 3 of Kaplan & Meier 1958)."""
        ends = np.append(self.times[1:], max(self.cap, self.times[-1]))  # (k + 1,)
        overlap = np.clip(ends - np.maximum(self.times, age), 0.0, None)  # (k + 1,) seconds of each step past `age`
        alive = self.level_at(age)
        return float(overlap @ self.levels) / alive if alive > 0 else 0.0

    def quantiles(self, shares: np.ndarray) -> np.ndarray:
        """Latencies below which each share of samples finish: shares (m,) -> seconds (m,); the mass the
        finished samples leave sits at `cap`."""
        reached = 1.0 - self.levels  # (k + 1,) nondecreasing: the share finished by each time
        steps = np.searchsorted(reached, shares, side="left")  # (m,) first step reaching each share
        ends = np.append(self.times, max(self.cap, float(self.times[-1])))  # (k + 2,)
        return ends[steps]

    def level_at(self, age: float) -> float:
        if age >= max(self.cap, self.times[-1]):
            return 0.0
        return float(self.levels[bisect.bisect_right(self.times.tolist(), age) - 1])


def survival(latencies: Sequence[float], finished: Sequence[bool], cap: float) -> Survival:
    """Kaplan–Meier over observed (finished) and censored (still running) latencies."""
    durations = np.asarray(latencies, dtype=np.float64)  # (n,)
    events = np.asarray(finished, dtype=bool)  # (n,)
    order = np.lexsort((~events, durations))  # ascending; at a tie, events before censorings (the usual convention)
    durations, events = durations[order], events[order]
    at_risk = len(durations) - np.arange(len(durations))  # (n,)
    factors = np.where(events, 1.0 - 1.0 / np.maximum(at_risk, 1), 1.0)  # (n,)
    levels = np.cumprod(factors)  # (n,) S just after each observation
    return Survival(np.concatenate(([0.0], durations)), np.concatenate(([1.0], levels)), cap)


@dataclass(frozen=True)
class EtaConfig:
    total: int  # samples the run generates (already finished ones on disk excluded)
    max_new_tokens: int  # the token limit: bounds how long a row can run


class GenerationEta:
    """Seconds left in a generation run, fed with each sample's start and finish."""

    def __init__(self, config: EtaConfig, clock: Callable[[], float] = time.perf_counter) -> None:
        self.config = config
        self.clock = clock
        self.began = clock()
        self.running: dict[SampleId, float] = {}  # start time of each row in flight
        self.latencies: list[float] = []  # of finished samples
        self.limit_latencies: list[float] = []  # of finished samples that hit the token limit
        self.seconds_per_token: list[float] = []
        self.starts_reported = False
        self.first_start = self.began
        self.peak_running = 0  # the slots of the backend: most rows seen running at once

    def started(self, sample: SampleId, now: float | None = None) -> None:
        now = self.clock() if now is None else now
        if not self.starts_reported:
            self.first_start = now  # model warm-up and the first prefill are behind us: not a pace to extrapolate
        self.starts_reported = True
        self.running[sample] = now
        self.peak_running = max(self.peak_running, len(self.running))

    def finished(self, sample: SampleId, seconds: float, num_tokens: int, finish_reason: str) -> None:
        self.running.pop(sample, None)
        self.latencies.append(seconds)
        if finish_reason == "length":
            self.limit_latencies.append(seconds)
        if num_tokens > 0:
            self.seconds_per_token.append(seconds / num_tokens)

    def cap(self) -> float:
        """The latency of an answer that runs to the token limit: measured, else extrapolated per token."""
        if self.limit_latencies:
            return max(self.limit_latencies)
        if self.seconds_per_token:
            return self.config.max_new_tokens * statistics.median(self.seconds_per_token)
        return 0.0

    def remaining(self, now: float | None = None) -> float | None:
        """Seconds until the last sample finishes, or None before the first one has finished."""
        now = self.clock() if now is None else now
        if not self.latencies or now <= self.began:
            return None
        ages = [max(now - start, 0.0) for start in self.running.values()]
        curve = survival(self.latencies + ages, [True] * len(self.latencies) + [False] * len(ages), self.cap())
        unstarted = max(self.config.total - len(self.latencies) - len(ages), 0)
        slots = max(self.peak_running, round(self.busy(ages, now)), 1)
        rests = [curve.mean_rest(age) for age in ages]
        latencies = curve.quantiles(spread(unstarted)).tolist()
        busy = self.busy(ages, now)
        return schedule_end(rests, latencies, slots) * slots / busy if busy > 0 else None

    def busy(self, ages: list[float], now: float) -> float:
        """Slots kept busy on average since the first row started (Little's law: slot-seconds / wall seconds)."""
        return (sum(self.latencies) + sum(ages)) / max(now - self.first_start, 1e-9)


GOLDEN = (5 ** 0.5 - 1) / 2


def spread(count: int) -> np.ndarray:
    """`count` shares in (0, 1) in a low-discrepancy order (count,): any run of them, the last few included,
    covers the latency distribution evenly (short and long answers interleaved, as in a shuffled queue)."""
    return (np.arange(1, count + 1) * GOLDEN) % 1.0


def schedule_end(running: Sequence[float], queued: Sequence[float], slots: int, exact_tail: int = 16) -> float:
    """When the last sample ends if `slots` run the rows in flight (their seconds left) and then the queued
    samples in order, each taking a free slot as one frees up. All but the last `exact_tail` x `slots` queued
    samples are spread evenly over the slots (their order does not change the end); the tail is scheduled."""
    ends = sorted(list(running) + [0.0] * max(slots - len(running), 0))
    bulk = max(len(queued) - exact_tail * slots, 0)
    share = sum(queued[:bulk]) / slots
    ends = [end + share for end in ends]
    heapq.heapify(ends)
    for seconds in queued[bulk:]:
        heapq.heappush(ends, heapq.heappop(ends) + seconds)
    return max(ends) if ends else 0.0


@dataclass(frozen=True)
class ExecutePace:
    """What the execute stage will take per program (`quench robustness` runs it after generation)."""

    seconds_per_program: float = 0.01  # wall seconds per program through the pool (measured on the meaning check)
    workers: int = 1  # sandbox workers: timeouts run side by side
    timeout_s: float = SandboxLimits.timeout_s  # a program that loops costs this much of one worker
    timeout_rate: float = 0.01  # share of programs that time out (a prior above recorded HumanEval runs')

    def seconds(self, programs: int) -> float:
        return programs * (self.seconds_per_program + self.timeout_rate * self.timeout_s / max(self.workers, 1))


@dataclass(frozen=True)
class RunLeft:
    """Seconds left in a run: the samples still to generate, then the programs to execute."""

    generate: float
    execute: float
    done: float  # share of this call's samples finished

    @property
    def total(self) -> float:
        return self.generate + self.execute


class RunEta:
    """The whole run's ETA (generation, then execution), fed by the pipeline's progress callbacks."""

    def __init__(self, max_new_tokens: int, execute: ExecutePace, clock: Callable[[], float] = time.perf_counter) -> None:
        self.max_new_tokens = max_new_tokens
        self.execute = execute
        self.clock = clock
        self.generation: GenerationEta | None = None
        self.programs = 0
        self.answers: set[int] = set()  # hashes of the distinct (task, completion, solution) finished
        self.answered = 0  # samples finished

    def plan(self, samples: int, programs: int) -> None:
        """A generate call begins: `samples` to generate, then at most `programs` to execute."""
        self.generation = GenerationEta(EtaConfig(samples, self.max_new_tokens), self.clock)
        self.programs = programs
        self.answers, self.answered = set(), 0

    def distinct_programs(self) -> int:
        """The programs to execute: one per distinct answer of a task (answers repeat across variants), at the
        share of distinct answers among the samples finished so far."""
        if not self.answered:
            return self.programs
        return round(self.programs * len(self.answers) / self.answered)

    def started(self, sample: SampleId) -> None:
        if self.generation is not None:
            self.generation.started(sample)

    def finished(self, record: SampleRecord) -> None:
        self.answers.add(hash((record.task_id, record.completion or "", record.solution or "")))
        self.answered += 1
        if self.generation is not None:
            self.generation.finished(record.generation_key, record.seconds or 0.0, record.num_tokens or 0,
                                     record.finish_reason or "")

    def done(self) -> float:
        """The share of this call's samples finished."""
        if self.generation is None:
            return 0.0
        return len(self.generation.latencies) / max(self.generation.config.total, 1)

    def left(self, now: float | None = None) -> RunLeft | None:
        """None until a sample has finished."""
        generate = self.generation.remaining(now) if self.generation is not None else None
        if generate is None:
            return None
        return RunLeft(generate, self.execute.seconds(self.distinct_programs()), self.done())


class StartReporting:
    """A backend that also tells how many samples each `generate` call asks for and, where the backend
    can say (`reports_starts`), when each sample takes a slot; everything else is the backend's own."""

    def __init__(self, backend, on_plan: Callable[[int], None], on_start: Callable[[str, int], None]) -> None:
        self.backend = backend
        self.on_plan = on_plan
        self.on_start = on_start

    def generate(self, requests: Iterable[GenerationRequest], sampling: SamplingParams, **options):
        requests = list(requests)
        self.on_plan(sum(request.n for request in requests))
        if getattr(self.backend, "reports_starts", False):
            options["on_start"] = self.on_start
        return self.backend.generate(requests, sampling, **options)

    def __getattr__(self, name: str):
        return getattr(self.backend, name)
