"""`RayPool`: `SandboxPool`'s interface over Ray actors, each holding a warm local SandboxPool.

An actor per group of CPUs keeps a sandbox pool of that many fork-server workers running on its
node, so a program pays neither Python's start-up nor Ray's per-task overhead alone: programs
travel in chunks. Keys never leave the driver; a result is yielded once per key even if its
chunk ran twice because an actor or node was lost.
"""

from __future__ import annotations

import logging
import math
import os
from collections import Counter
from types import TracebackType
from typing import Hashable, Iterable, Iterator, Mapping, Sequence, TypeVar

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from quench.distributed.chunks import balanced_size, batched
from quench.distributed.cluster import cpu_slots, node_id
from quench.distributed.config import RayOptions
from quench.distributed.dispatch import DispatchStats, Fleet, dispatch
from quench.execution import ExecutionResult, Isolation, SandboxLimits, SandboxPool, choose_isolation
from quench.execution.pool import GRACE_S, run_in_order

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
DEFAULT_CHUNK = 8  # programs per Ray call (see docs/ray.md for the measurement)
# Logical CPUs an execution actor reserves: none. quench never runs sandboxes while it generates
# (nor the reverse), and `quench robustness` holds both fleets at once, so execution actors must
# fit next to idle generation actors that hold every CPU. They are placed by the nodes' CPU counts
# instead (`cpu_slots`), one sandbox worker per CPU.
RESERVED_CPUS = 0
Numbered = tuple[int, str, float | None]  # (driver-side item number, program, its limit; None: the pool's)


@ray.remote(max_restarts=0)
class ExecutionWorker:
    """A local SandboxPool on one node, started once and reused for every chunk."""

    def __init__(self, workers: int, limits: SandboxLimits, isolation: str) -> None:
        unconfined = isolation == "unconfined"  # the driver's explicit opt-in, required on every node alike
        self.pool = SandboxPool(workers, limits, isolation="rlimits" if unconfined else isolation,
                                allow_unconfined=unconfined)
        self.pool.start()

    def ready(self) -> dict[str, object]:
        return {"node": node_id(), "pid": os.getpid(), "isolation": self.pool.isolation, "confined": self.pool.confined}

    def run(self, chunk: list[Numbered]) -> list[tuple[int, ExecutionResult]]:
        timeouts = {number: timeout for number, _, timeout in chunk if timeout}
        return list(self.pool.imap(((number, program) for number, program, _ in chunk), timeouts or None))

    def close(self) -> None:
        self.pool.close()


class RayPool:
    """Run untrusted programs in sandboxes on Ray nodes; same interface as `SandboxPool`.

    `workers`: sandbox workers in the whole cluster (None: one per CPU the cluster has), in actors
    of `options.cpus_per_actor` workers each, placed on the nodes in proportion to their CPUs.
    """

    def __init__(
        self,
        workers: int | None = None,
        limits: SandboxLimits = SandboxLimits(),
        *,
        isolation: str = "auto",
        options: RayOptions = RayOptions(),
        allow_unconfined: bool = False,
    ) -> None:
        if workers is not None and workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self.limits = limits
        self.options = options
        # Resolved here and required on every node, so `isolation` holds for every program.
        self.isolation: Isolation = choose_isolation(isolation, allow_unconfined=allow_unconfined)
        self._per_actor = max(1, int(options.cpus_per_actor))
        self._placed: Counter[str] = Counter()  # actors this pool has put on each node
        count = options.num_actors or (math.ceil(workers / self._per_actor) if workers else max(1, len(cpu_slots(self._per_actor))))
        self.fleet = Fleet(self._new_actor, count, options)
        self.workers = self.fleet.size * self._per_actor

    @property
    def stats(self) -> DispatchStats:
        return self.fleet.stats

    def _next_node(self) -> str | None:
        """The alive node with the most CPU slots not yet holding one of our actors."""
        slots = Counter(cpu_slots(self._per_actor))
        if not slots:
            return None
        node = max(slots, key=lambda n: (slots[n] - self._placed[n], slots[n]))
        self._placed[node] += 1
        return node

    def _new_actor(self):  # -> ray ActorHandle
        node = self._next_node()
        # Hard affinity (a soft one was seen to stack actors on one node); an actor sent to a node
        # that is dying fails to start, and its replacement looks at the nodes alive then.
        place = NodeAffinitySchedulingStrategy(node, soft=False) if node else "SPREAD"
        return ExecutionWorker.options(num_cpus=RESERVED_CPUS, scheduling_strategy=place).remote(
            self._per_actor, self.limits, self.isolation
        )

    @property
    def confined(self) -> bool:
        self.start()
        return all(bool(member.info.get("confined")) for member in self.fleet.ready)

    def start(self) -> None:
        """Start the actors; return when one is ready (the others join when they are)."""
        if not self.fleet.ready:
            self.fleet.wait_ready(1)

    def close(self) -> None:
        self.fleet.close(farewell="close")

    def __enter__(self) -> "RayPool":
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def run_many(self, programs: Sequence[str], timeouts: Sequence[float] | None = None) -> list[ExecutionResult]:
        """Results in the order of `programs`; `timeouts`: each program's own wall-clock limit."""
        return run_in_order(self, programs, timeouts)

    def imap(
        self, items: Iterable[tuple[K, str]], timeouts: Mapping[K, float] | None = None
    ) -> Iterator[tuple[K, ExecutionResult]]:
        """Yield `(key, result)` as chunks finish (unordered); `timeouts` maps a key to its own limit."""
        self.start()
        keyed = list(items)
        limits = timeouts or {}
        size = balanced_size(len(keyed), self.fleet.size, self.options.chunk_size or DEFAULT_CHUNK, self.options.inflight_per_actor)
        chunks = batched(((number, program, limits.get(key)) for number, (key, program) in enumerate(keyed)), size)
        done: set[int] = set()

        def chunk_deadline(chunk: list[Numbered]) -> float:
            longest = max((timeout or self.limits.timeout_s for _, _, timeout in chunk), default=self.limits.timeout_s)
            return 60.0 + (longest + GRACE_S) * math.ceil(len(chunk) / self._per_actor)

        for _, results in dispatch(self.fleet, chunks, lambda actor, chunk: actor.run.remote(chunk), chunk_deadline):
            for number, result in results:
                if number in done:
                    self.stats.duplicates_dropped += 1
                    continue
                done.add(number)
                yield keyed[number][0], result
