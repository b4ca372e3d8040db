"""`SandboxPool`: N sandboxed fork-server workers that run programs in parallel.

Each worker is one long-lived sandbox (see sandbox.py) around a small fork server (see
forkserver.py) that forks one child per program, so the ~30 ms Python start-up is paid once per
worker instead of once per program. Workers are started with subprocess, never by forking the
caller, so the pool works from a process that has torch loaded. A worker that dies or stops
answering is killed as a whole and restarted; the program it was running gets an outcome. A worker
that reports itself unclean after a program (its cleanup failed, or left files) is replaced before
it runs another, and a program whose run failed in the harness (`sandbox_error`) runs once more in
a fresh worker.
"""

from __future__ import annotations

import json
import logging
import os
import selectors
import signal
import struct
import subprocess
import time
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Callable, Hashable, Iterable, Iterator, Mapping, Sequence, TypeVar

from quench.errors import QuenchError
from quench.execution.cleanup import force_remove
from quench.execution.outcomes import ExecutionResult, Outcome, classify
from quench.execution.sandbox import (
    WORKER_ENV,
    Isolation,
    SandboxLimits,
    choose_isolation,
    worker_command,
)
from quench.execution.uids import WorkerUid, allocate

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
START_TIMEOUT_S = 60.0  # a cold start on a loaded machine; normally ~50 ms
GRACE_S = 5.0  # beyond a program's limit and its cleanup before an unanswering worker is presumed hung
SCRATCH_PREFIX = "/tmp/quench-sandbox-"  # "rlimits" mode: each fork server's scratch directory


class _Worker:
    """One fork-server process and its framed pipes."""

    def __init__(self, command: list[str], namespaced: bool) -> None:
        self.command = command
        self.namespaced = namespaced
        self.process: subprocess.Popen[bytes] | None = None
        self.buffer = bytearray()
        self.program_group: int | None = None  # "rlimits" mode: the running program's group
        self.ready: dict[str, object] = {}
        self.unhealthy: str | None = None  # why the worker must be replaced before its next program

    def start(self) -> None:
        self.buffer.clear()
        self.program_group = None
        self.ready = {}
        self.unhealthy = None
        self.process = subprocess.Popen(
            self.command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**WORKER_ENV, "QUENCH_POOL_PID": str(os.getpid())},  # the fork server checks its parent
            start_new_session=True,  # its own group: killing the worker kills all of it
            cwd="/",
        )

    def wait_ready(self) -> None:
        frames = self.read_until(time.monotonic() + START_TIMEOUT_S)
        if not frames or not frames[0].get("ready"):
            self.kill()
            raise QuenchError(f"sandbox worker failed to start: {' '.join(self.command[:3])} ...")
        self.ready = frames[0]

    def fileno(self) -> int:
        assert self.process is not None and self.process.stdout is not None
        return self.process.stdout.fileno()

    def send(self, program: str, timeout_s: float | None = None) -> bool:
        """Write one request (`timeout_s`: its own wall-clock limit); False if the worker is gone."""
        if self.process is None or self.process.stdin is None:
            return False
        data = _encode({"program": program, **({"timeout_s": timeout_s} if timeout_s else {})})
        try:
            self.process.stdin.write(data)
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            return False
        return True

    def read_frames(self) -> list[dict[str, object]] | None:
        """Frames readable now; None once the worker has closed its pipe (it died)."""
        chunk = os.read(self.fileno(), 65536)
        if not chunk:
            return None
        self.buffer += chunk
        frames = []
        while len(self.buffer) >= 4:
            (size,) = struct.unpack(">I", self.buffer[:4])
            if len(self.buffer) < 4 + size:
                break
            frames.append(_decode(bytes(self.buffer[4 : 4 + size])))
            del self.buffer[: 4 + size]
        for frame in frames:  # "started" names the running program's group ("rlimits" mode only)
            self.program_group = int(frame["started"]) if "started" in frame else None  # type: ignore[call-overload]
            if "unhealthy" in frame:
                self.unhealthy = str(frame.pop("unhealthy"))
        return [frame for frame in frames if "started" not in frame]

    def read_until(self, deadline: float) -> list[dict[str, object]] | None:
        with selectors.DefaultSelector() as selector:
            selector.register(self.fileno(), selectors.EVENT_READ)
            while (remaining := deadline - time.monotonic()) > 0:
                if selector.select(remaining):
                    frames = self.read_frames()
                    if frames is None or frames:
                        return frames
        return None

    def kill(self) -> None:
        """Kill the worker and everything under it, and reap it."""
        if self.process is None:
            return
        # bwrap: its child is the fork server, the namespace's init; killing it kills the whole
        # namespace and lets bwrap exit. "rlimits": the running child dies with the server.
        targets = _children(self.process.pid) if self.namespaced else [self.process.pid]
        for pid in targets:
            _kill(pid, os.kill)
        if self.program_group is not None:  # "rlimits": the program's own subprocesses
            _kill(self.program_group, os.killpg)
        try:
            self.process.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            _kill(self.process.pid, os.killpg)
            self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None and not pipe.closed:
                try:
                    pipe.close()
                except OSError:
                    pass
        self.process = None
        scratch = self.ready.get("scratch")  # "rlimits": a killed server cannot remove its own
        if isinstance(scratch, str) and scratch.startswith(SCRATCH_PREFIX):
            try:
                force_remove(scratch)
            except OSError as err:
                log.error("could not remove a sandbox worker's scratch directory %s: %s", scratch, err)

    def request_exit(self) -> None:
        """Close the request pipe: an idle fork server reaps its children and exits."""
        if self.process is not None and self.process.stdin is not None:
            try:
                self.process.stdin.close()
            except OSError:
                pass

    def stop(self, patience_s: float = 2.0) -> None:
        """Wait for a requested exit, then make sure of it."""
        if self.process is None:
            return
        try:
            self.process.wait(timeout=patience_s)
        except subprocess.TimeoutExpired:
            pass
        self.kill()


@dataclass
class _Job:
    key: object
    started: float
    deadline: float
    program: str = ""
    timeout_s: float | None = None  # None: the pool's limit
    retry: bool = False  # this run repeats one that timed out
    rerun: bool = False  # this run repeats one that failed in the harness (sandbox_error)


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
        self._pool: list[_Worker] = []
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
            workers = [_Worker(worker_command(self.isolation, self.limits, self.workers, self._python, uid),
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
        then ends in time, that result stands, marked flaky_timeout.
        """
        self.start()
        source = iter(items)
        retries: list[_Job] = []
        idle = list(self._pool)
        busy: dict[_Worker, _Job] = {}
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
                        retries.append(self._job(job.key, job.program, None, job.timeout_s, retry=True))
                        continue
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
        return _Job(key, now, now + answer_within(timeout_s or self.limits.timeout_s), program, timeout_s, retry)

    def _dispatch(self, worker: _Worker, program: str, timeout_s: float | None = None) -> bool:
        """Send a program, restarting the worker once if it had died while idle."""
        if worker.send(program, timeout_s):
            return True
        return self._restart(worker) and worker.send(program, timeout_s)

    def _collect(self, busy: dict[_Worker, _Job]) -> list[tuple[_Worker, ExecutionResult]]:
        """Wait for at least one busy worker to answer, die or pass its deadline."""
        finished: list[tuple[_Worker, ExecutionResult]] = []
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

    def _worker_died(self, worker: _Worker, job: _Job) -> ExecutionResult:
        seconds = time.monotonic() - job.started
        self._restart(worker)
        # In "rlimits" mode a program can kill its fork server (os.kill(os.getppid(), 9));
        # in "bwrap" mode only something outside the sandbox can.
        return ExecutionResult(Outcome.crashed, "the sandbox worker died while running the program", seconds)

    def _restart(self, worker: _Worker) -> bool:
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


def _kill(target: int, how: Callable[[int, int], None]) -> None:
    try:
        how(target, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as handle:
            return [int(child) for child in handle.read().split()]
    except OSError:
        return []


def _encode(message: dict[str, object]) -> bytes:
    data = json.dumps(message).encode()
    return struct.pack(">I", len(data)) + data


def _decode(data: bytes) -> dict[str, object]:
    return dict(json.loads(data))


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
