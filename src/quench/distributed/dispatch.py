"""Spread chunks of work over a fleet of Ray actors; requeue what a lost actor or node held.

The driver keeps every chunk it has handed out (per actor, with a deadline) until its result is
back. A chunk whose actor dies, whose node goes away, whose result object is lost, or that passes
its deadline is handed to another actor; the actor is killed (a hung one would keep its chunk
forever) and a replacement started while the budget allows. A chunk comes back whole or not at
all, so requeueing never yields part of one twice; callers still dedupe on their item keys.
Every `ray.wait` and `ray.get` here has a timeout.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Iterable, Iterator, TypeVar

import ray
from ray.exceptions import RayError, RayTaskError

from quench.distributed.config import RayOptions
from quench.errors import QuenchError

log = logging.getLogger(__name__)

P = TypeVar("P")  # a chunk's payload
GET_TIMEOUT_S = 120.0  # fetching a finished result (it may come from another node)
KILL_ERRORS = (RayError, ValueError)  # ray.kill on an actor that is already gone


@dataclass
class DispatchStats:
    """What happened during the runs of one fleet (for logs, tests and benchmarks)."""

    chunks_done: int = 0
    chunks_requeued: int = 0
    actors_started: int = 0
    actors_lost: int = 0
    duplicates_dropped: int = 0
    chunks_by_node: Counter = field(default_factory=Counter)  # node id -> chunks finished there


@dataclass
class Member:
    """One actor of the fleet."""

    handle: Any  # ray.actor.ActorHandle
    spawned: float
    info: dict = field(default_factory=dict)  # what its ready() returned: node id, pid, ...
    load: int = 0  # chunks handed to it and not yet back


@dataclass
class _Work(Generic[P]):
    payload: P
    attempts: int = 0


@dataclass
class _Flight(Generic[P]):
    work: _Work[P]
    member: Member
    deadline: float


class Fleet:
    """Ray actors made by `make`; started together, replaced when lost, killed at close."""

    def __init__(self, make: Callable[[], Any], size: int, options: RayOptions) -> None:
        self.make = make
        self.size = size
        self.options = options
        self.ready: list[Member] = []
        self.starting: dict[Any, Member] = {}  # ready() ref -> actor being created
        self.replacements_left = options.max_replacements if options.max_replacements is not None else 2 * size
        self.failures: list[str] = []  # why actors could not start or were lost
        self.stats = DispatchStats()
        self._started = False

    def start(self) -> None:
        if not self._started:
            self._started = True
            for _ in range(self.size):
                self._spawn()

    def _spawn(self) -> None:
        handle = self.make()
        self.starting[handle.ready.remote()] = Member(handle, time.monotonic())
        self.stats.actors_started += 1

    def wait_ready(self, count: int = 1) -> None:
        """Block until `count` actors are ready (the others join the work when they are).

        Fails when no actor can start within the start timeout; with at least one ready, it goes on.
        """
        self.start()
        deadline = time.monotonic() + self.options.start_timeout_s
        while len(self.ready) < count and self.starting and (left := deadline - time.monotonic()) > 0:
            done, _ = ray.wait(list(self.starting), num_returns=1, timeout=min(self.options.poll_s, left))
            for ref in done:
                self.on_ready(ref)
        if len(self.ready) < count:
            self.check_alive(busy=False, now_or_never=True)
            log.warning("%d of %d Ray actors ready after %.0f s; going on with those", len(self.ready), count, self.options.start_timeout_s)

    def on_ready(self, ref: Any) -> None:
        member = self.starting.pop(ref)
        try:
            member.info = dict(ray.get(ref, timeout=GET_TIMEOUT_S))
        except RayError as err:
            self._kill(member)
            init_failed = bool(getattr(err, "actor_init_failed", False))
            self.failures.append(f"an actor failed to start: {_short(err, last_line=init_failed)}")
            log.error("%s", self.failures[-1])
            if not init_failed:  # its node went away: try elsewhere; an error in its own start-up would repeat
                self._replace()
            return
        self.ready.append(member)
        log.info("Ray actor ready on node %s (pid %s)", str(member.info.get("node", "?"))[:12], member.info.get("pid"))

    def lose(self, member: Member, reason: str) -> None:
        """Drop an actor that died, lost its node or hung; start another if the budget allows."""
        if member in self.ready:
            self.ready.remove(member)
        self._kill(member)
        self.stats.actors_lost += 1
        self.failures.append(reason)
        log.warning("lost a Ray actor on node %s: %s", str(member.info.get("node", "?"))[:12], reason)
        self._replace()

    def _replace(self) -> None:
        if self.replacements_left > 0:
            self.replacements_left -= 1
            self._spawn()

    def check_alive(self, busy: bool, now_or_never: bool = False) -> None:
        """Fail when no actor is ready, none is busy, and none can start in time."""
        if self.ready or busy:
            return
        if not self.starting:
            raise QuenchError("no Ray actor is left: " + "; ".join(self.failures[-3:]))
        oldest = min(member.spawned for member in self.starting.values())
        if now_or_never or time.monotonic() - oldest > self.options.start_timeout_s:
            raise QuenchError(
                f"no Ray actor became ready within {self.options.start_timeout_s:g} s "
                f"(cluster resources: {ray.available_resources()}); " + "; ".join(self.failures[-3:])
            )

    def close(self, farewell: str | None = None, patience_s: float = 5.0) -> None:
        """Kill every actor; first let ready ones run their `farewell` method (e.g. stop subprocesses)."""
        if farewell and self.ready:
            refs = [getattr(member.handle, farewell).remote() for member in self.ready]
            ray.wait(refs, num_returns=len(refs), timeout=patience_s)
        for member in [*self.ready, *self.starting.values()]:
            self._kill(member)
        self.ready, self.starting = [], {}

    @staticmethod
    def _kill(member: Member) -> None:
        try:
            ray.kill(member.handle, no_restart=True)
        except KILL_ERRORS:
            pass


def dispatch(
    fleet: Fleet,
    chunks: Iterable[P],
    call: Callable[[Any, P], Any],
    timeout_for: Callable[[P], float],
) -> Iterator[tuple[P, Any]]:
    """Yield `(chunk, result)` as chunks finish, each chunk once, whatever actors are lost on the way.

    `call(actor handle, chunk)` submits one chunk and returns its ObjectRef; an exception raised by
    the work itself (not by the loss of its actor) is raised here.
    """
    fleet.start()
    flights = _Flights(fleet, iter(chunks), call, timeout_for)
    try:
        while True:
            flights.hand_out()
            if flights.done():
                return
            fleet.check_alive(busy=bool(flights.flying))
            for ref in _wait_some([*flights.flying, *fleet.starting], fleet.options.poll_s):
                if ref in fleet.starting:
                    fleet.on_ready(ref)
                    continue
                finished = flights.land(ref)
                if finished is not None:
                    yield finished
            flights.drop_hung()
    finally:
        flights.cancel()


class _Flights(Generic[P]):
    """The chunks of one `dispatch`: those still to hand out (requeued ones first), and those in flight, each
    with its actor and deadline, until its result is back."""

    def __init__(self, fleet: Fleet, source: Iterator[P], call: Callable[[Any, P], Any],
                 timeout_for: Callable[[P], float]) -> None:
        self.fleet, self.source, self.call, self.timeout_for = fleet, source, call, timeout_for
        self.requeued: deque[_Work[P]] = deque()
        self.flying: dict[Any, _Flight[P]] = {}  # ObjectRef -> its flight
        self.exhausted = False

    def next_work(self) -> _Work[P] | None:
        """A requeued chunk, else the source's next one (None: nothing left to hand out now)."""
        if self.requeued:
            return self.requeued.popleft()
        if not self.exhausted:
            payload = next(self.source, _END)
            if payload is not _END:
                return _Work(payload)  # type: ignore[arg-type]
            self.exhausted = True
        return None

    def hand_out(self) -> None:
        """Fill every ready actor up to its in-flight limit."""
        for member in list(self.fleet.ready):
            while member.load < self.fleet.options.inflight_per_actor and (work := self.next_work()) is not None:
                deadline = time.monotonic() + self.timeout_for(work.payload)
                self.flying[self.call(member.handle, work.payload)] = _Flight(work, member, deadline)
                member.load += 1

    def done(self) -> bool:
        return not self.flying and not self.requeued and self.exhausted

    def land(self, ref: Any) -> tuple[P, Any] | None:
        """(chunk, result) of a ready ref; None where its actor was dropped earlier or was lost with it (its
        chunks requeued). The work's own exception is raised."""
        flight = self.flying.pop(ref, None)
        if flight is None:
            return None  # its actor was dropped earlier in this round
        flight.member.load -= 1
        try:
            result = ray.get(ref, timeout=GET_TIMEOUT_S)
        except RayTaskError as err:
            raise err.as_instanceof_cause() from None
        except RayError as err:
            self.flying[ref] = flight  # so that lose() requeues it with the actor's other chunks
            self.lose(flight.member, _short(err))
            return None
        stats = self.fleet.stats
        stats.chunks_done += 1
        stats.chunks_by_node[str(flight.member.info.get("node", "?"))] += 1
        return flight.work.payload, result

    def drop_hung(self) -> None:
        """Lose each ready actor holding a chunk past its deadline."""
        now = time.monotonic()
        for flight in list(self.flying.values()):
            if now > flight.deadline and flight.member in self.fleet.ready:
                self.lose(flight.member, f"no result within {self.timeout_for(flight.work.payload):g} s (hung?)")

    def lose(self, member: Member, reason: str) -> None:
        """Requeue every chunk `member` holds (QuenchError for one past its attempts) and drop the actor."""
        for ref, flight in list(self.flying.items()):
            if flight.member is member:
                del self.flying[ref]
                flight.work.attempts += 1
                if flight.work.attempts >= self.fleet.options.max_attempts:
                    raise QuenchError(f"a chunk of work failed {flight.work.attempts} times; last: {reason}")
                self.requeued.append(flight.work)
                self.fleet.stats.chunks_requeued += 1
        self.fleet.lose(member, reason)

    def cancel(self) -> None:
        """Cancel what is still in flight (abandoned by the caller: don't let it hold actors longer than needed)."""
        for ref in self.flying:
            try:
                ray.cancel(ref)
            except KILL_ERRORS:
                pass


_END = object()


def _wait_some(refs: list[Any], timeout: float) -> list[Any]:
    """The refs ready within `timeout` (at least one unless it passes), without waiting for all."""
    if not refs:
        time.sleep(min(timeout, 0.05))
        return []
    done, rest = ray.wait(refs, num_returns=1, timeout=timeout, fetch_local=False)
    if done and rest:
        more, _ = ray.wait(rest, num_returns=len(rest), timeout=0, fetch_local=False)
        done += more
    return done


def _short(err: BaseException, last_line: bool = False) -> str:
    """One line about `err`; `last_line`: the end of a remote traceback (the exception itself)."""
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    if last_line and lines:
        return lines[-1][:300]
    return f"{type(err).__name__}: {lines[0] if lines else ''}"[:300]
