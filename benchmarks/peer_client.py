"""A peer system of `benchmarks/generation.py` run as a worker process in its own virtual environment: token ids in,
token ids out, one JSON line each way, the call timed by the worker's own clocks.

The protocol is `benchmarks/vllm_worker.py`'s (its docstring shows it); `openvino_worker.py` and `llamacpp_worker.py`
speak it. A worker answers {"ready": true} once its model is loaded, and {"error": ...} for a command it cannot run.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from quench.engine.types import GenerationRequest, GenerationResult, SamplingParams


@dataclass(frozen=True)
class CallTimes:
    """The worker's own clock for one call: no pipe or JSON in it."""

    seconds: float = 0.0
    cpu_seconds: float = 0.0  # the worker process's CPU time, all its threads


def check_python(path: str | None, flag: str, environment: str) -> Path | None:
    """A peer environment's interpreter, or None where none is named; ValueError naming the flag and the path where
    it is not an executable file."""
    if not path:
        return None
    python = Path(path)
    if not (python.is_file() and os.access(python, os.X_OK)):
        raise ValueError(f"{flag}: {path} is not an executable file (the {environment} environment's python)")
    return python


QUENCH_ONLY: set[str] = set()  # variables set for quench's own process (its OpenMP wait), not the peers'


def peer_environment() -> dict[str, str]:
    """This process's environment without what was set for quench alone: each peer keeps its own defaults."""
    return {name: value for name, value in os.environ.items() if name not in QUENCH_ONLY}


class WorkerBackend:
    """generate(requests, sampling) like quench's backends; the call's wall and CPU time in `last_times`."""

    def __init__(self, name: str, command: list[str], batch_size: int, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.batch_size = batch_size
        self.last_times = CallTimes()
        self._log = tempfile.NamedTemporaryFile("w+", prefix=f"{name}-worker-", suffix=".log", delete=False)
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                        text=True, env=peer_environment() | (env or {}))
        self._answer()  # {"ready": true} once the model is loaded

    @property
    def pid(self) -> int:
        return self.process.pid

    def _answer(self) -> dict[str, Any]:
        line = self.process.stdout.readline()
        if not line:
            self._log.seek(0)
            tail = self._log.read()[-3000:]
            raise RuntimeError(f"the {self.name} worker exited (log {self._log.name}):\n{tail}")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"the {self.name} worker: {answer['error']}")
        return answer

    def generate(self, requests: Iterable[GenerationRequest], sampling: SamplingParams) -> list[GenerationResult]:
        requests = list(requests)
        command = {
            "op": "generate",
            "requests": [{"ids": list(r.prompt_ids), "n": r.n} for r in requests],
            "temperature": sampling.temperature,
            "max_tokens": sampling.max_new_tokens,
            "min_tokens": sampling.min_tokens,
            "ignore_eos": sampling.ignore_eos,
            "seed": sampling.seed,
        }
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        answer = self._answer()
        self.last_times = CallTimes(answer["seconds"], answer["cpu_seconds"])
        return [
            GenerationResult(request.key, request.sample_offset + index, tuple(ids), "", reason)
            for request, samples, reasons in zip(requests, answer["outputs"], answer["finish"])
            for index, (ids, reason) in enumerate(zip(samples, reasons))
        ]

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.write(json.dumps({"op": "quit"}) + "\n")
            self.process.stdin.flush()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        os.unlink(self._log.name)
