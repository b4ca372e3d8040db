"""`EngineProcess`: the live loop in a process of its own, used like `LiveEngine` from the front end.

The front end (HTTP, validation, tokenization, detokenization, streaming) keeps its interpreter to
itself; the engine process (`quench.engine.serving.engine_core`) does nothing but steps. They talk
over one pipe (`quench.engine.serving.channel`): a message per submit or cancel one way, one message
per step with all of that step's events the other. A reader thread of the front end hands each event
to its request's sink, as `LiveEngine`'s thread would.

The engine process is spawned (nothing of the front end's torch state is shared) and builds its
backend itself from `EngineSpec.build`. If it dies (killed, out of memory), every open request gets
`Failed` at once and a fresh engine process starts; until it is ready `accepting()` is False and
`submit` raises EngineStopped. Requests admitted by the queue limit are counted here: a request waits
until the engine says its first sample took a slot.
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
import time
from dataclasses import dataclass, field

from quench.engine.serving.channel import Cancel, Ready, StepEvents, Stop, Submit, ToEngine
from quench.engine.serving.engine_core import EngineSpec, run_engine
from quench.engine.serving.events import Failed, Finished, LiveEvent, Sink
from quench.engine.serving.gauges import EngineGauges
from quench.engine.serving.live_queue import EngineStopped, QueueFull
from quench.engine.types import GenerationRequest, SamplingParams
from quench.errors import QuenchError

log = logging.getLogger(__name__)

START_TIMEOUT_S = 600.0  # for the engine process to load the model
RESTART_TRIES = 3  # engine processes that fail to load in a row before the front end stops trying
EXIT_WAIT_S = 5.0  # for an engine process told to stop (or found dead) to exit


@dataclass
class OpenRequest:
    sink: Sink
    samples_left: int
    started: bool = False  # a sample took a slot: no longer counted as waiting


@dataclass
class ChannelStats:
    """The pipe's cost, over the engine's life: per step message, the CPU time the engine's loop spent sending
    it and the (wall) time from its send to its delivery here."""

    messages: int = 0
    engine_s: float = 0.0
    transit_s: float = 0.0


@dataclass
class EngineProcess:
    spec: EngineSpec
    restarts: int = field(default=0, init=False)  # engine processes started after one died
    channel: ChannelStats = field(default_factory=ChannelStats, init=False)
    _state: str = field(default="stopped", init=False)  # running, restarting, stopping, stopped, failed
    _open: dict[int, OpenRequest] = field(default_factory=dict, init=False)
    _next_ticket: int = field(default=0, init=False)
    _gauges: EngineGauges = field(default=EngineGauges(0, 0, 0, 0, 0, 0.0, 0, 0), init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)  # the open requests and sending
    _process: multiprocessing.process.BaseProcess | None = field(default=None, init=False)
    _conn: object | None = field(default=None, init=False)
    _reader: threading.Thread | None = field(default=None, init=False)

    @property
    def max_len(self) -> int:
        return self.spec.max_len

    @property
    def pid(self) -> int | None:
        """The engine process's id (None before it starts)."""
        return self._process.pid if self._process is not None else None

    def start(self) -> "EngineProcess":
        """Start the engine process and wait until its model is loaded; QuenchError if it fails to."""
        self._launch()
        self._state = "running"
        self._reader = threading.Thread(target=self._read, name="quench-engine-events", daemon=True)
        self._reader.start()
        return self

    def submit(self, request: GenerationRequest, sampling: SamplingParams, sink: Sink, top_logprobs: int | None = None) -> int:
        """As `LiveEngine.submit`: the request's ticket; QueueFull or EngineStopped when it cannot wait."""
        if len(request.prompt_ids) + sampling.max_new_tokens > self.max_len:
            raise ValueError(f"{len(request.prompt_ids)} prompt + {sampling.max_new_tokens} new tokens > {self.max_len}")
        with self._lock:
            if self._state != "running":
                raise EngineStopped("the engine is shutting down" if self._state == "stopping"
                                    else f"the engine is not running ({self._state})")
            if sum(not held.started for held in self._open.values()) >= self.spec.max_waiting:
                raise QueueFull(f"{self.spec.max_waiting} requests are already waiting")
            ticket, self._next_ticket = self._next_ticket, self._next_ticket + 1
            self._open[ticket] = OpenRequest(sink, request.n)
            if not self._send(Submit(ticket, request, sampling, top_logprobs)):
                del self._open[ticket]
                raise EngineStopped("the engine process exited; it is restarting")
        return ticket

    def cancel(self, ticket: int) -> None:
        with self._lock:
            if self._open.pop(ticket, None) is not None:
                self._send(Cancel(ticket))

    def accepting(self) -> bool:
        return self._state == "running"

    def gauges(self) -> EngineGauges:
        """The engine's gauges as of its last step's message."""
        return self._gauges

    def stop(self, timeout: float = 10.0) -> None:
        """Take no more requests, have the engine fail the ones held ("shutting down") and exit."""
        with self._lock:
            if self._state in ("stopped", "stopping"):
                return
            self._state = "stopping"
            self._send(Stop())
        if self._reader is not None:
            self._reader.join(timeout)
        process = self._process
        if process is not None and process.is_alive():
            process.terminate()
            process.join(EXIT_WAIT_S)
        self._fail_open("the server is shutting down")
        self._state = "stopped"

    # -- the reader thread -------------------------------------------------------------------------

    def _read(self) -> None:
        """Deliver each step's events until the engine process exits; restart it unless stopping."""
        while True:
            try:
                message = self._conn.recv()  # type: ignore[union-attr]
            except (EOFError, OSError):
                if not self._engine_lost():
                    return
                continue
            if isinstance(message, StepEvents):
                self._deliver(message)

    def _deliver(self, message: StepEvents) -> None:
        self.channel.messages += 1
        self.channel.engine_s += message.flush_s
        self.channel.transit_s += time.perf_counter() - message.sent
        deliveries: list[tuple[int, Sink, LiveEvent]] = []
        with self._lock:
            self._gauges = message.gauges
            for ticket in message.started:
                if ticket in self._open:
                    self._open[ticket].started = True
            for ticket, event in message.events:
                held = self._open.get(ticket)
                if held is None:
                    continue  # cancelled, or failed already
                held.samples_left -= isinstance(event, Finished)
                if isinstance(event, Failed) or held.samples_left <= 0:
                    del self._open[ticket]
                deliveries.append((ticket, held.sink, event))
        for ticket, sink, event in deliveries:
            try:
                sink(event)
            except Exception:
                log.exception("request %d: its sink failed; cancelling it", ticket)
                self.cancel(ticket)

    def _engine_lost(self) -> bool:
        """The pipe closed: fail every open request, then start a fresh engine unless stopping. Whether one runs."""
        process = self._process
        if process is not None:
            process.join(EXIT_WAIT_S)
        code = process.exitcode if process is not None else None
        with self._lock:
            stopping = self._state == "stopping"
            if not stopping:
                self._state = "restarting"
        if stopping:
            self._fail_open("the server is shutting down")
            return False
        log.error("the engine process exited (exit code %s); failing its requests and starting another", code)
        self._fail_open(f"the engine process exited (exit code {code}); the server is restarting it")
        for attempt in range(1, RESTART_TRIES + 1):
            try:
                self._launch()
            except QuenchError as err:
                log.error("engine restart %d of %d failed: %s", attempt, RESTART_TRIES, err)
                continue
            with self._lock:
                if self._state == "restarting":
                    self._state = "running"
                    self.restarts += 1
                    return True
            return False
        self._state = "failed"
        return False

    def _fail_open(self, message: str) -> None:
        with self._lock:
            lost, self._open = self._open, {}
        for ticket, held in lost.items():
            try:
                held.sink(Failed(message))
            except Exception:
                log.exception("request %d: its sink failed", ticket)

    # -- the process and the pipe ------------------------------------------------------------------

    def _launch(self) -> None:
        """Spawn an engine process and wait for its `Ready`; QuenchError if it does not come."""
        context = multiprocessing.get_context("spawn")
        ours, theirs = context.Pipe(duplex=True)
        process = context.Process(target=run_engine, args=(theirs, self.spec), name="quench-engine", daemon=True)
        process.start()
        theirs.close()  # only the engine holds its end: its exit closes the pipe here
        try:
            if not ours.poll(START_TIMEOUT_S):
                raise QuenchError(f"the engine process did not load the model within {START_TIMEOUT_S:.0f} s")
            ready = ours.recv()
        except (EOFError, OSError):
            process.join(EXIT_WAIT_S)
            raise QuenchError(f"the engine process exited while loading the model (exit code {process.exitcode})") from None
        except QuenchError:
            process.kill()
            raise
        if not isinstance(ready, Ready) or ready.error is not None:
            process.join(EXIT_WAIT_S)
            raise QuenchError(f"the engine process could not load the model: {getattr(ready, 'error', ready)}")
        with self._lock:
            self._process, self._conn = process, ours
            self._gauges = EngineGauges(0, 0, 0, 0, ready.slots, 0.0, 0, 0)

    def _send(self, message: ToEngine) -> bool:
        """Write `message` to the engine (the caller holds the lock); False if the pipe is closed."""
        try:
            self._conn.send(message)  # type: ignore[union-attr]
        except (OSError, ValueError):
            return False
        return True
