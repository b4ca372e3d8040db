"""The `vllm` backend of `benchmarks/generation.py`: vLLM's CPU build in its own virtual environment, run as a
worker process (`benchmarks/vllm_worker.py`) that takes token ids and answers token ids.

The worker's threads are pinned to the first `threads` cores (`VLLM_CPU_OMP_THREADS_BIND`), its KV cache is 1 GiB,
and its engine core runs in the worker's own process, so the CPU time the worker reports is all of vLLM's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from quench.engine.types import GenerationRequest, GenerationResult, SamplingParams

WORKER = Path(__file__).with_name("vllm_worker.py")
PYTHON_ENV = "QUENCH_VLLM_PYTHON"  # the vLLM environment's interpreter, where --vllm-python is not given


def check_python(path: str | None) -> Path | None:
    """The vLLM environment's interpreter, or None where none is named; ValueError naming the path where it is
    not an executable file."""
    if not path:
        return None
    python = Path(path)
    if not (python.is_file() and os.access(python, os.X_OK)):
        raise ValueError(f"--vllm-python: {path} is not an executable file (the vllm-cpu environment's python)")
    return python


def thread_cores(threads: int) -> str:
    """VLLM_CPU_OMP_THREADS_BIND for `threads` threads: the first cores this process may run on, e.g. "0-1"."""
    cores = sorted(os.sched_getaffinity(0))[:threads]
    return ",".join(str(core) for core in cores)


@dataclass
class CallTimes:
    """The worker's own clock for one call: no pipe or JSON in it."""

    seconds: float = 0.0
    cpu_seconds: float = 0.0


class VLLMBackend:
    """generate(requests, sampling) like the other backends; the call's wall and CPU time in `last_times`."""

    name = "vllm"

    def __init__(self, python: Path, model_dir: str, batch_size: int, threads: int, seed: int = 1) -> None:
        self.batch_size = batch_size
        self.last_times = CallTimes()
        self._log = tempfile.NamedTemporaryFile("w+", prefix="vllm-worker-", suffix=".log", delete=False)
        env = os.environ | {
            "OMP_NUM_THREADS": str(threads),
            "VLLM_CPU_OMP_THREADS_BIND": thread_cores(threads),
            "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # the engine core in the worker's process
        }
        command = [str(python), str(WORKER), "--model", model_dir, "--batch-size", str(batch_size), "--seed", str(seed)]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                        text=True, env=env)
        self._answer()  # {"ready": true} once the engine is built (the first start compiles for minutes)

    @property
    def pid(self) -> int:
        return self.process.pid

    def _answer(self) -> dict[str, Any]:
        line = self.process.stdout.readline()
        if not line:
            self._log.seek(0)
            tail = self._log.read()[-3000:]
            raise RuntimeError(f"the vLLM worker exited (log {self._log.name}):\n{tail}")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"the vLLM worker: {answer['error']}")
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


if __name__ == "__main__":  # a smoke run: python benchmarks/vllm_client.py /path/to/vllm/python MODEL_DIR
    backend = VLLMBackend(Path(sys.argv[1]), sys.argv[2], batch_size=1, threads=1)
    [result] = backend.generate([GenerationRequest("smoke", (1, 2, 3, 4))], SamplingParams(max_new_tokens=8))
    print(result.token_ids, result.finish_reason, backend.last_times)
    backend.close()
