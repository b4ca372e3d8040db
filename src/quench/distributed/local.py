"""`LocalEngines`: the `Backend` protocol over N engine processes on this machine, one model each.

On a CPU, one engine with T threads decodes less than T engines with one thread each: a decode
step's matrix products are small (a row per live sample), and splitting them over threads costs
more than it saves. `LocalEngines` starts N processes (spawned, so nothing of the parent's torch
state is shared), each loading the model itself from a `ModelSpec` with `threads` torch threads.
`generate` deals the requests out in blocks of one batch, round-robin (so each engine gets
neighbouring prompts, whose beginnings it can share, and a fair share of the whole), and yields
samples as the engines finish them. Each engine runs its whole share in one continuous batch, so
no engine idles between chunks.

What each engine generates depends only on its share and the settings: a run is deterministic
for a given number of engines. The parent writes every file, so resume works as with one engine.
A worker that dies (killed, out of memory) ends the run with a `QuenchError`; what finished
before is kept by the caller.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import pickle
import queue
import signal
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from quench.distributed.config import ModelSpec, worker_env
from quench.engine.types import GenerationRequest, GenerationResult, SamplingParams
from quench.errors import QuenchError

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
POLL_S = 0.5  # how often a waiting parent checks that every engine is still alive
START_TIMEOUT_S = 600.0  # to load the model in every engine


@dataclass(frozen=True)
class EngineTask:
    """One engine's share of a `generate` call."""

    call: int  # which `generate` call: messages of an abandoned earlier call are dropped
    requests: tuple[GenerationRequest, ...]
    sampling: SamplingParams
    stop_hook: object | None  # a picklable `StopHook`, or None for the engine's own
    report_starts: bool = False  # send a message as each sample takes a slot (progress estimates)


def serve(index: int, spec: ModelSpec, threads: int, tasks, results) -> None:  # runs in the engine process
    """Load the model, say so, then run each task and send its samples back one by one."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it stops us
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # and if the parent is killed, we die with it
    os.environ.update({**worker_env(), "OMP_NUM_THREADS": str(threads)})
    import torch

    torch.set_num_threads(threads)
    try:
        backend = spec.build()
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
        results.put(("error", index, 0, f"{type(exc).__name__}: {exc}"))
        return
    results.put(("ready", index, 0, None))
    while (task := tasks.get()) is not None:
        try:
            options: dict[str, object] = {"stop_hook": task.stop_hook} if task.stop_hook is not None else {}
            if task.report_starts:
                options["on_start"] = lambda key, sample, call=task.call: results.put(("start", index, call, (key, sample)))
            for result in backend.generate(task.requests, task.sampling, **options):
                results.put(("sample", index, task.call, result))
            results.put(("done", index, task.call, None))
        except Exception as exc:  # noqa: BLE001
            results.put(("error", index, task.call, f"{type(exc).__name__}: {exc}"))


def deal(requests: list[GenerationRequest], engines: int, block: int) -> list[list[GenerationRequest]]:
    """Blocks of `block` consecutive requests dealt round-robin to `engines` shares."""
    shares: list[list[GenerationRequest]] = [[] for _ in range(engines)]
    for start in range(0, len(requests), block):
        shares[(start // block) % engines].extend(requests[start:start + block])
    return shares


def picklable(value: object) -> bool:
    try:
        pickle.dumps(value)
    except Exception:  # noqa: BLE001 - any failure means: cannot be sent to an engine
        return False
    return True


class LocalEngines:
    """Generation spread over `engines` local processes; `generate` yields samples as they finish."""

    takes_stop_hook = True  # a picklable hook goes to the engines; another is refused (run_backend cuts instead)
    reports_starts = True  # `generate(..., on_start=)`: told when each sample takes a slot in any engine

    def __init__(self, spec: ModelSpec, engines: int, threads: int = 1) -> None:
        if engines < 1:
            raise QuenchError(f"--engines must be at least 1, got {engines}")
        self.spec = spec.portable()
        self.engines = engines
        self.threads = max(1, threads)
        self.name = f"{engines}x{spec.backend.name}"
        self.block = spec.backend.engine.batch_size
        context = multiprocessing.get_context("spawn")
        self._results = context.Queue()
        self._tasks = [context.Queue() for _ in range(engines)]
        self._processes = [
            context.Process(target=serve, args=(i, self.spec, self.threads, self._tasks[i], self._results),
                            name=f"quench-engine-{i}", daemon=True)
            for i in range(engines)
        ]
        for process in self._processes:
            process.start()
        self._ready: set[int] = set()
        self._calls = 0

    def wait_ready(self) -> None:
        """Block until every engine has loaded its model."""
        while len(self._ready) < self.engines:
            kind, index, _, payload = self._next(START_TIMEOUT_S)
            if kind != "ready":
                raise QuenchError(f"engine {index}: unexpected {kind!r} while loading")
            self._ready.add(index)
        log.info("%d engine processes ready, %d torch thread(s) each", self.engines, self.threads)

    def generate(self, requests: Iterable[GenerationRequest], sampling: SamplingParams,
                 stop_hook: object | None = None,
                 on_start: Callable[[str, int], None] | None = None) -> Iterator[GenerationResult]:
        requests = list(requests)
        if not requests:
            return
        if stop_hook is not None and not picklable(stop_hook):
            raise QuenchError("the stop rule cannot be sent to the engine processes; run with --engines 1")
        self.wait_ready()
        self._calls += 1
        call, busy = self._calls, set()
        for index, share in enumerate(deal(requests, self.engines, self.block)):
            if share:
                self._tasks[index].put(EngineTask(call, tuple(share), sampling, stop_hook, on_start is not None))
                busy.add(index)
        while busy:
            kind, index, of_call, payload = self._next(None)
            if of_call != call:
                continue  # left over from a call whose caller stopped reading
            if kind == "sample":
                yield payload
            elif kind == "start" and on_start is not None:
                on_start(*payload)
            elif kind == "done":
                busy.discard(index)
            else:
                raise QuenchError(f"engine {index}: {payload if kind == 'error' else 'unexpected ' + kind}")

    def _next(self, timeout_s: float | None) -> tuple[str, int, int, object]:
        """The next message of any engine; QuenchError if an engine died or `timeout_s` passed."""
        waited = 0.0
        while True:
            try:
                message = self._results.get(timeout=POLL_S)
            except queue.Empty:
                waited += POLL_S
                dead = [(i, p.exitcode) for i, p in enumerate(self._processes) if not p.is_alive()]
                if dead:
                    index, code = dead[0]
                    raise QuenchError(f"engine process {index} died (exit code {code}); run the same command "
                                      "again to continue") from None
                if timeout_s is not None and waited >= timeout_s:
                    raise QuenchError(f"the engine processes did not load the model within {timeout_s:.0f} s") from None
                continue
            if message[0] == "error":
                raise QuenchError(f"engine {message[1]}: {message[3]}")
            return message

    def close(self) -> None:
        for tasks, process in zip(self._tasks, self._processes):
            if process.is_alive():
                tasks.put(None)
        for process in self._processes:
            process.join(timeout=5)
            if process.is_alive():
                process.terminate()
                process.join(timeout=5)

    def __enter__(self) -> "LocalEngines":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
