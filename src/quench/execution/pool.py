"""`SandboxPool`: N sandboxed fork-server workers that run programs in parallel.

Each worker is one long-lived sandbox (see sandbox.py) around a small fork server (see
forkserver.py) that forks one child per program, so Python's start-up is paid once per
worker instead of once per program. Workers are started with subprocess, never by forking the
caller, so the pool works from a process that has torch loaded. A worker that dies or stops
answering is killed as a whole and restarted; the program it was running gets an outcome. A worker
that reports itself unclean after a program (its cleanup failed, or left files) is replaced before
it runs another, and a program whose run failed in the harness (`sandbox_error`) runs once more in
a fresh worker.
"""

from __future__ import annotations

import logging
import os
import selectors
import time
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Hashable, Iterable, Iterator, Mapping, Sequence, TypeVar

from quench.errors import QuenchError
from quench.execution.outcomes import ExecutionResult, Outcome, classify, ran_unhindered
from quench.execution.pressure import cpu_stall_us, stall_share
from quench.execution.sandbox import (
    Isolation,
    SandboxLimits,
    choose_isolation,
    worker_command,
)
from quench.execution.uids import WorkerUid, allocate
from quench.execution.worker import Worker

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
GRACE_S = 5.0  # beyond a program's limit and its cleanup before an unanswering worker is presumed hung


@dataclass
class _Job:
    key: object
    started: float
    deadline: float
    program: str = ""
    timeout_s: float | None = None  # None: the pool's limit
    retry: bool = False  # this run repeats one that timed out
    rerun: bool = False  # this run repeats one that failed in the harness (sandbox_error)
    stall_us: int | None = None  # the machine's CPU stall count when it was sent (pressure.cpu_stall_us)


class SandboxPool:
    """Run untrusted programs, each in its own sandboxed process, across `workers` processes.

    Use as a context manager; `isolation` is "auto" (bwrap if it works here, else rlimits), "bwrap"
    or "rlimits". Where programs cannot be confined it raises QuenchError, unless `allow_unconfined`
    (then `isolation` is "unconfined"). `python` runs the programs (default: this interpreter).
    Not thread-safe: one consumer at a time. Workers die with the thread that started them
    (parent-death signal), so start the pool in a thread that outlives its use; a worker found
    dead while idle is restarted.
    """

    def __init__(
        self,
        workers: int | None = None,
        limits: SandboxLimits = SandboxLimits(),
        *,
        isolation: str = "auto",
        allow_unconfined: bool = False,
        python: str | None = None,
    ) -> None:
        self.workers = workers if workers is not None else (os.cpu_count() or 1)
        if self.workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self.limits = limits
        self.isolation: Isolation = choose_isolation(isolation, allow_unconfined=allow_unconfined, python=python)
        self._python = python
        self._pool: list[Worker] = []
        self._uids: list[WorkerUid] = []  # one per worker, held while the pool runs (confined modes, as root)

    @property
    def confined(self) -> bool:
        """Whether programs run as a user that cannot touch our files or signal our processes."""
        return self.isolation != "unconfined"

    @property
    def network_isolated(self) -> bool:
        """Whether programs have no network (always in "bwrap"; in "rlimits" only with CAP_SYS_ADMIN)."""
        self.start()
        return all(bool(worker.ready.get("network_isolated")) for worker in self._pool)

    def worker_pids(self) -> list[int]:
        """Host pids of the worker processes (the bwrap or fork-server processes), for monitoring."""
        return [worker.process.pid for worker in self._pool if worker.process is not None]

    def __enter__(self) -> "SandboxPool":
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def start(self) -> None:
        if self._pool:
            return
        self._uids = allocate(self.workers) if self.confined else []
        uids = [held.uid for held in self._uids] or [None] * self.workers
        try:
            workers = [Worker(worker_command(self.isolation, self.limits, self.workers, self._python, uid),
                               self.isolation == "bwrap") for uid in uids]
        except BaseException:
            self._release_uids()
            raise
        try:
            for worker in workers:  # start all first: their Python start-ups overlap
                worker.start()
            for worker in workers:
                worker.wait_ready()
        except BaseException:
            for worker in workers:
                worker.kill()
            self._release_uids()
            raise
        self._pool = workers
        log.info("sandbox pool: %d workers, isolation %s", len(workers), self.isolation)

    def close(self) -> None:
        """Stop every worker; no process of the pool is left afterwards. Never raises (failures are logged)."""
        for worker in self._pool:
            worker.request_exit()
        for worker in self._pool:
            try:
                worker.stop()
            except Exception as err:  # noqa: BLE001 - closing must not fail the caller's run
                log.error("could not stop a sandbox worker cleanly: %s", err)
        self._pool = []
        self._release_uids()

    def worker_uids(self) -> list[int]:
        """The uid each worker's programs run as outside any namespace (empty when not root)."""
        return [held.uid for held in self._uids]

    def _release_uids(self) -> None:
        for held in self._uids:
            held.release()
        self._uids = []

    def run_many(self, programs: Sequence[str], timeouts: Sequence[float] | None = None) -> list[ExecutionResult]:
        """Results in the order of `programs`; `timeouts`: each program's own wall-clock limit."""
        return run_in_order(self, programs, timeouts)

    def imap(
        self, items: Iterable[tuple[K, str]], timeouts: Mapping[K, float] | None = None
    ) -> Iterator[tuple[K, ExecutionResult]]:
        """Yield `(key, result)` as programs finish (unordered); `timeouts` maps a key to its own limit.

        A program that times out runs once more with the same limit (limits.timeout_retries): if it
        then ends in time, that result stands, marked flaky_timeout. Not one whose processes had the CPU
        for nearly all of its limit while no task waited for one (`ran_unhindered`): no load slowed it, and a
        second run ends the same way.
        """
        self.start()
        source = iter(items)
        retries: list[_Job] = []
        idle = list(self._pool)
        busy: dict[Worker, _Job] = {}
        try:
            while True:
                while idle and (retries or (item := next(source, None)) is not None):
                    job = retries.pop() if retries else self._job(item[0], item[1], timeouts)
                    worker = idle.pop()
                    if self._dispatch(worker, job.program, job.timeout_s):
                        busy[worker] = job
                    else:
                        idle.append(worker)
                        unavailable = ExecutionResult(Outcome.sandbox_error, "sandbox worker unavailable")
                        yield job.key, unavailable  # type: ignore[misc]
                if not busy:
                    return
                for worker, result in self._collect(busy):
                    job = busy.pop(worker)
                    # A harness failure is the worker's, not the program's: a fresh worker runs it again.
                    rerun = result.outcome is Outcome.sandbox_error and not job.rerun
                    if worker.unhealthy is not None or rerun:
                        log.warning("replacing a sandbox worker: %s", worker.unhealthy or result.detail)
                        self._restart(worker)
                    idle.append(worker)
                    if rerun:
                        again = self._job(job.key, job.program, None, job.timeout_s, retry=job.retry)
                        retries.append(replace(again, rerun=True))
                        continue
                    if result.outcome is Outcome.timeout and not job.retry and self.limits.timeout_retries:
                        limit = job.timeout_s or self.limits.timeout_s
                        stalled = stall_share(job.stall_us, cpu_stall_us(), time.monotonic() - job.started)
                        if not ran_unhindered(result, limit, stalled):
                            retries.append(self._job(job.key, job.program, None, job.timeout_s, retry=True))
                            continue
                        log.debug("a timeout not run again: %s s of CPU in its %g s, some task waiting %s of it",
                                  result.cpu_seconds, limit, stalled)
                    if job.retry and result.outcome is not Outcome.timeout:
                        result = replace(result, flaky_timeout=True)
                    yield job.key, result  # type: ignore[misc]
        finally:
            for worker in busy:  # abandoned mid-program: never let it reach the next caller
                self._restart(worker)

    def _job(self, key: object, program: str, timeouts: Mapping | None, timeout_s: float | None = None,
             retry: bool = False) -> _Job:
        if timeouts is not None:
            timeout_s = timeouts.get(key)
        now = time.monotonic()
        return _Job(key, now, now + answer_within(timeout_s or self.limits.timeout_s), program, timeout_s, retry,
                    stall_us=cpu_stall_us())

    def _dispatch(self, worker: Worker, program: str, timeout_s: float | None = None) -> bool:
        """Send a program, restarting the worker once if it had died while idle."""
        if worker.send(program, timeout_s):
            return True
        return self._restart(worker) and worker.send(program, timeout_s)

    def _collect(self, busy: dict[Worker, _Job]) -> list[tuple[Worker, ExecutionResult]]:
        """Wait for at least one busy worker to answer, die or pass its deadline."""
        finished: list[tuple[Worker, ExecutionResult]] = []
        with selectors.DefaultSelector() as selector:
            for worker in busy:
                selector.register(worker.fileno(), selectors.EVENT_READ, worker)
            while not finished:
                timeout = max(0.0, min(job.deadline for job in busy.values()) - time.monotonic())
                for key, _ in selector.select(timeout):
                    worker = key.data
                    frames = worker.read_frames()
                    if frames is None:
                        finished.append((worker, self._worker_died(worker, busy[worker])))
                    elif frames:
                        finished.append((worker, classify(frames[0], self.limits)))
                now = time.monotonic()
                done = {worker for worker, _ in finished}
                for worker, job in busy.items():
                    if worker not in done and now > job.deadline:
                        self._restart(worker)
                        waited = answer_within(job.timeout_s or self.limits.timeout_s)
                        detail = f"sandbox worker gave no answer within {waited:g} s"
                        finished.append((worker, ExecutionResult(Outcome.timeout, detail, now - job.started)))
        return finished

    def _worker_died(self, worker: Worker, job: _Job) -> ExecutionResult:
        seconds = time.monotonic() - job.started
        self._restart(worker)
        # In "rlimits" mode a program can kill its fork server (os.kill(os.getppid(), 9));
        # in "bwrap" mode only something outside the sandbox can.
        return ExecutionResult(Outcome.crashed, "the sandbox worker died while running the program", seconds)

    def _restart(self, worker: Worker) -> bool:
        worker.kill()
        try:
            worker.start()
            worker.wait_ready()
        except (OSError, QuenchError) as err:
            log.error("could not restart a sandbox worker: %s", err)
            return False
        return True


def answer_within(timeout_s: float) -> float:
    """How long a worker may take to answer: the program's limit, as long again to remove what it made, and a grace."""
    return 2 * timeout_s + GRACE_S


def run_in_order(pool, programs: Sequence[str], timeouts: Sequence[float] | None) -> list[ExecutionResult]:
    """`run_many` of a pool whose `imap` yields `(key, result)` as programs finish: results in `programs`' order."""
    limits = dict(enumerate(timeouts)) if timeouts is not None else None
    return in_order(pool.imap(enumerate(programs), limits), len(programs))


def in_order(pairs: Iterable[tuple[int, ExecutionResult]], count: int) -> list[ExecutionResult]:
    """The results of an unordered `imap` over `enumerate(programs)`, back in program order."""
    results: list[ExecutionResult | None] = [None] * count
    for index, result in pairs:
        results[index] = result
    return [result for result in results if result is not None]
