"""The engine process's side: the live loop on the process's main thread, and a reader of the front end's messages.

The main thread does nothing but steps: after each step, `flush` sends that step's events as one
`StepEvents` message. The reader thread blocks on the pipe, so it costs the loop nothing while no
message comes; a message (a submit, a cancel) takes it a few microseconds of the interpreter.
"""

from __future__ import annotations

import ctypes
import logging
import signal
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Callable

from quench.engine.backend import QuenchBackend
from quench.engine.serving.channel import Cancel, Ready, StepEvents, Stop, Submit
from quench.engine.serving.engine_thread import LiveEngine
from quench.engine.serving.events import Failed, Finished, LiveEvent, Sink
from quench.engine.serving.live_queue import EngineStopped, QueueFull
from quench.engine.serving.loop import PREFILL_BUDGET

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1  # prctl: a signal for this process when the thread that started it ends


@dataclass(frozen=True)
class EngineSpec:
    """What the engine process needs (picklable): how to build its backend, and the live engine's limits."""

    build: Callable[[], QuenchBackend]  # run in the engine process: loads the model there
    max_len: int  # prompt + generated tokens of one row, at most
    max_waiting: int = 256
    prefill_budget: int = PREFILL_BUDGET
    threads: int = 1  # torch threads of the engine process
    prefill_share: float | None = None  # LiveEngine.prefill_share


def run_engine(conn: Connection, spec: EngineSpec) -> None:  # the engine process's target
    """Load the backend, say `Ready`, then serve until the front end says `Stop` or goes away."""
    # Ctrl-C and SIGTERM to the server's process group are the front end's to handle: it lets requests in flight
    # finish, then says `Stop`
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # a front end killed outright takes us with it
    import torch

    torch.set_num_threads(spec.threads)
    try:
        backend = spec.build()
    except Exception as err:  # noqa: BLE001 - reported to the front end, which raises it
        conn.send(Ready(0, f"{type(err).__name__}: {err}"))
        return
    core = EngineCore(conn, LiveEngine(backend, spec.max_len, spec.max_waiting, spec.prefill_budget,
                                          spec.prefill_share))
    conn.send(Ready(backend.config.batch_size))
    threading.Thread(target=core.read, name="quench-engine-reader", daemon=True).start()
    core.engine.serve()
    core.flush()
    conn.close()


class EngineCore:
    """A `LiveEngine` whose sinks collect (ticket, event) pairs that `flush` sends once per step."""

    def __init__(self, conn: Connection, engine: LiveEngine) -> None:
        self.conn = conn
        self.engine = engine
        self._lock = threading.Lock()  # the outbox and the ticket maps (sinks run on the loop's thread)
        self._send_lock = threading.Lock()
        self._outbox: list[tuple[int, LiveEvent]] = []
        self._started: list[int] = []  # queue indices whose first sample took a slot since the last flush
        self._index_of: dict[int, int] = {}  # ticket -> queue index
        self._ticket_of: dict[int, int] = {}  # queue index -> ticket
        self._flush_s = 0.0  # the last flush's CPU seconds on the loop's thread (gathering, pickling, writing)
        engine.flush = self.flush
        engine.queue.on_start = self._note_start

    def _note_start(self, index: int) -> None:
        self._started.append(index)  # under the queue's lock: no lock of ours here

    def read(self) -> None:
        """Apply the front end's messages until `Stop` (or until it goes away: the same)."""
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                message = Stop()
            if isinstance(message, Submit):
                self._submit(message)
            elif isinstance(message, Cancel):
                with self._lock:
                    index = self._index_of.get(message.ticket)
                if index is not None:
                    self.engine.cancel(index)
            elif isinstance(message, Stop):
                self.engine.stop(timeout=0)
                return

    def _submit(self, message: Submit) -> None:
        sink = self._sink(message.ticket, message.request.n)
        with self._lock:  # a flush waits until the maps know the new index
            try:
                index = self.engine.submit(message.request, message.sampling, sink, message.top_logprobs)
            except (QueueFull, EngineStopped, ValueError) as err:
                self._outbox.append((message.ticket, Failed(str(err))))
            else:
                self._index_of[message.ticket] = index
                self._ticket_of[index] = message.ticket
                return
        self.flush()

    def _sink(self, ticket: int, samples: int) -> Sink:
        left = [samples]

        def sink(event: LiveEvent) -> None:
            with self._lock:
                self._outbox.append((ticket, event))
                left[0] -= isinstance(event, Finished)
                if isinstance(event, Failed) or left[0] <= 0:
                    self._ticket_of.pop(self._index_of.pop(ticket, -1), None)
        return sink

    def flush(self) -> None:
        """Send the events since the last flush, with the requests started and the gauges, as one message."""
        cpu = time.thread_time()
        with self._lock:
            events, self._outbox = self._outbox, []
            started, self._started = self._started, []
            tickets = tuple(self._ticket_of[i] for i in started if i in self._ticket_of)
        if not events and not tickets:
            return
        message = StepEvents(tuple(events), tickets, self.engine.gauges(), self._flush_s, time.perf_counter())
        try:
            with self._send_lock:
                self.conn.send(message)
        except OSError:  # the front end went away: the reader stops the engine
            return
        self._flush_s = time.thread_time() - cpu
