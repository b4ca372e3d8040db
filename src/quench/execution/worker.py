"""One sandbox worker as the pool sees it: a fork-server process, its framed pipes, and how it is killed.

The pool (pool.py) starts, feeds and replaces workers; this file is what it does to one of them.
Frames both ways: a 4-byte big-endian length, then UTF-8 JSON (forkserver.py).
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
from typing import Callable

from quench.errors import QuenchError
from quench.execution.cleanup import force_remove
from quench.execution.sandbox import WORKER_ENV

log = logging.getLogger(__name__)

START_TIMEOUT_S = 60.0  # a cold start on a loaded machine, far above a normal start
SCRATCH_PREFIX = "/tmp/quench-sandbox-"  # "rlimits" mode: each fork server's scratch directory


class Worker:
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
