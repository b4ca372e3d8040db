"""The `vllm` backend of `benchmarks/generation.py`: vLLM's CPU build in its own virtual environment, run as a
worker process (`benchmarks/vllm_worker.py`) that takes token ids and answers token ids.

The worker's threads are pinned to the first `threads` cores (`VLLM_CPU_OMP_THREADS_BIND`), its KV cache is 1 GiB,
and its engine core runs in the worker's own process, so the CPU time the worker reports is all of vLLM's.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from peer_client import WorkerBackend
from peer_client import check_python as check_peer_python
from quench.engine.types import GenerationRequest, SamplingParams

WORKER = Path(__file__).with_name("vllm_worker.py")
PYTHON_ENV = "QUENCH_VLLM_PYTHON"  # the vLLM environment's interpreter, where --vllm-python is not given


def check_python(path: str | None) -> Path | None:
    """The vLLM environment's interpreter, or None where none is named; ValueError naming the path where it is
    not an executable file."""
    return check_peer_python(path, "--vllm-python", "vllm-cpu")


def thread_cores(threads: int) -> str:
    """VLLM_CPU_OMP_THREADS_BIND for `threads` threads: the first cores this process may run on, e.g. "0-1"."""
    cores = sorted(os.sched_getaffinity(0))[:threads]
    return ",".join(str(core) for core in cores)


class VLLMBackend(WorkerBackend):
    """generate(requests, sampling) like the other backends; the call's wall and CPU time in `last_times`."""

    def __init__(self, python: Path, model_dir: str, batch_size: int, threads: int, seed: int = 1) -> None:
        env = {
            "OMP_NUM_THREADS": str(threads),
            "VLLM_CPU_OMP_THREADS_BIND": thread_cores(threads),
            "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # the engine core in the worker's process
        }
        command = [str(python), str(WORKER), "--model", model_dir, "--batch-size", str(batch_size), "--seed", str(seed)]
        super().__init__("vllm", command, batch_size, env)  # ready once the engine is built (minutes, compiling)


if __name__ == "__main__":  # a smoke run: python benchmarks/vllm_client.py /path/to/vllm/python MODEL_DIR
    backend = VLLMBackend(Path(sys.argv[1]), sys.argv[2], batch_size=1, threads=1)
    [result] = backend.generate([GenerationRequest("smoke", (1, 2, 3, 4))], SamplingParams(max_new_tokens=8))
    print(result.token_ids, result.finish_reason, backend.last_times)
    backend.close()
