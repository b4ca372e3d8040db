"""`LocalEngines`: the `Backend` protocol over N engine processes on this machine, one model each.

On a CPU, one engine with T threads decodes less than T engines with one thread each: a decode
step's matrix products are small (a row per live sample), and splitting them over threads costs
more than it saves. `LocalEngines` starts N processes (spawned, so nothing of the parent's torch
state is shared), each loading the model itself from a `ModelSpec` with `threads` torch threads.
`generate` hands the requests out in blocks of one batch (so each engine gets neighbouring prompts,
whose beginnings it can share) and yields samples as the engines finish them. Each engine runs its
work in one continuous batch, so no engine idles between blocks.

Where a sample does not depend on the rows beside it (every engine's kernels batch-invariant, and
greedy rows, or sampled rows without drafts), each engine starts with one block and asks for the
next as its own run out (`WorkQueue.more`): the engines finish together, whatever their answers'
lengths. Elsewhere the blocks are dealt round-robin before anything starts, so that what each engine
generates depends only on its share: a run is deterministic for a given number of engines. Either
way the parent writes every file, so resume works as with one engine.
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
from quench.runs.backends import BackendOptions

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
    on_demand: bool = False  # ask the parent for another block whenever the requests run out
    longest: GenerationRequest | None = None  # on demand: the call's longest prompt (checked and sized for first)


@dataclass(frozen=True)
class Block:
    """The parent's answer to an engine's request for more work in call `call`: nothing ends its queue."""

    call: int
    requests: tuple[GenerationRequest, ...]


def next_block(index: int, call: int, results, blocks) -> list[GenerationRequest]:  # runs in the engine process
    """Ask the parent for call `call`'s next block and wait for it; answers to earlier calls' asks are skipped, and
    the parent closing (None) ends the queue."""
    results.put(("more", index, call, None))
    while (block := blocks.get()) is not None:
        if block.call == call:
            return list(block.requests)
    return []


def hands_out_on_demand(options: BackendOptions, invariant: Iterable[bool], sampling: SamplingParams) -> bool:
    """Whether blocks go to the engines as they ask (module docstring): every engine batch-invariant (`invariant`,
    one flag per engine), and greedy rows or no drafts."""
    drafts = options.name == "quench" and options.engine.drafter != "none"
    return all(invariant) and (sampling.greedy or not drafts)


def batch_invariant(backend: object) -> bool:
    """Whether a backend's rows get the same bits whatever rows share their steps (quench's engine on
    batch-invariant kernels)."""
    plan = getattr(getattr(backend, "runner", None), "plan", None)
    return bool(getattr(plan, "batch_invariant", False))


def serve(index: int, spec: ModelSpec, threads: int, tasks, blocks, results) -> None:  # runs in the engine process
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
    results.put(("ready", index, 0, {"invariant": batch_invariant(backend)}))
    while (task := tasks.get()) is not None:
        try:
            options: dict[str, object] = {"stop_hook": task.stop_hook} if task.stop_hook is not None else {}
            if task.report_starts:
                options["on_start"] = lambda key, sample, call=task.call: results.put(("start", index, call, (key, sample)))
            if task.on_demand:
                options["more"] = lambda call=task.call: next_block(index, call, results, blocks)
                options["longest"] = task.longest
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
        self._blocks = [context.Queue() for _ in range(engines)]  # answers to an engine's asks for more work
        self._processes = [
            context.Process(target=serve, name=f"quench-engine-{i}", daemon=True,
                            args=(i, self.spec, self.threads, self._tasks[i], self._blocks[i], self._results))
            for i in range(engines)
        ]
        for process in self._processes:
            process.start()
        self._ready: dict[int, bool] = {}  # engine -> whether its samples ignore the rows beside them
        self._calls = 0

    def wait_ready(self) -> None:
        """Block until every engine has loaded its model."""
        while len(self._ready) < self.engines:
            kind, index, _, payload = self._next(START_TIMEOUT_S)
            if kind != "ready":
                raise QuenchError(f"engine {index}: unexpected {kind!r} while loading")
            self._ready[index] = bool(payload["invariant"])
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
        on_demand = hands_out_on_demand(self.spec.backend, self._ready.values(), sampling)
        blocks = [requests[start:start + self.block] for start in range(0, len(requests), self.block)]
        shares = blocks[:self.engines] if on_demand else deal(requests, self.engines, self.block)
        longest = max(requests, key=lambda r: len(r.prompt_ids)) if on_demand else None
        for index, share in enumerate(shares):
            if share:
                self._tasks[index].put(EngineTask(call, tuple(share), sampling, stop_hook, on_start is not None,
                                                  on_demand, longest))
                busy.add(index)
        handed = len(shares)
        while busy:
            kind, index, of_call, payload = self._next(None)
            if kind == "more":  # every ask is answered, an earlier call's with nothing, so no engine waits
                block = blocks[handed] if on_demand and of_call == call and handed < len(blocks) else []
                handed += bool(block)
                self._blocks[index].put(Block(of_call, tuple(block)))
                continue
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
        for tasks, blocks, process in zip(self._tasks, self._blocks, self._processes):
            if process.is_alive():
                tasks.put(None)
                blocks.put(None)
        for process in self._processes:
            process.join(timeout=5)
            if process.is_alive():
                process.terminate()
                process.join(timeout=5)

    def __enter__(self) -> "LocalEngines":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
