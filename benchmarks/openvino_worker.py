"""OpenVINO GenAI as a `benchmarks/generation.py` backend: one `LLMPipeline` on a GGUF file, driven over stdin/stdout.

Run with the Python of a virtual environment that has `openvino-genai` (quench need not be installed there):

    /path/to/openvino-venv/bin/python benchmarks/openvino_worker.py --gguf FILE --batch-size 8 --threads 1

The pipeline reads the GGUF itself and runs with the continuous-batching scheduler (`SchedulerConfig`: at most
--batch-size sequences at once, 1 GB of KV cache, no prefix cache, the rest OpenVINO's defaults) on
--threads inference threads. The protocol is `benchmarks/vllm_worker.py`'s: one JSON command per line on stdin,
one JSON answer per line on stdout (OpenVINO's own output goes to stderr):

    {"op": "generate", "requests": [{"ids": [...], "n": 8}], "temperature": 0.8, "max_tokens": 128,
     "min_tokens": 0, "ignore_eos": true, "seed": 1}
    -> {"outputs": [[[ids of sample 0], ...], ...], "finish": [["length", ...], ...],
        "seconds": wall, "cpu_seconds": this process's CPU time}

A call's prompts go to the pipeline as one left-padded batch with its attention mask (the scheduler takes each
row without its padding); every request of a call has the same n (`num_return_sequences`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from worker_protocol import protocol_stream, serve

# benchmarks/ holds scripts whose names libraries may import as modules: past worker_protocol, this directory is no
# place to import from
sys.path = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

CACHE_GB = 1  # KV cache, as the vLLM worker's


def build_pipeline(args: argparse.Namespace) -> Any:
    import openvino_genai

    scheduler = openvino_genai.SchedulerConfig()
    scheduler.max_num_seqs = args.batch_size
    scheduler.cache_size = CACHE_GB
    scheduler.enable_prefix_caching = False
    return openvino_genai.LLMPipeline(args.gguf, "CPU", scheduler_config=scheduler, INFERENCE_NUM_THREADS=args.threads)


def padded_batch(prompts: list[list[int]]) -> Any:
    """The prompts left-padded to one length, with the mask that marks their real tokens."""
    import numpy as np
    import openvino
    import openvino_genai

    width = max(len(ids) for ids in prompts)
    ids = np.zeros((len(prompts), width), dtype=np.int64)  # (B, L)
    mask = np.zeros((len(prompts), width), dtype=np.int64)  # (B, L)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = prompt
        mask[row, width - len(prompt):] = 1
    return openvino_genai.TokenizedInputs(openvino.Tensor(ids), openvino.Tensor(mask))


def generation_config(command: dict[str, Any], n: int) -> Any:
    import openvino_genai

    config = openvino_genai.GenerationConfig(
        max_new_tokens=command["max_tokens"], min_new_tokens=command.get("min_tokens", 0),
        ignore_eos=command.get("ignore_eos", False), num_return_sequences=n, rng_seed=command.get("seed", 1),
    )
    if command["temperature"] > 0:  # plain temperature sampling, as quench's: no top-k, top-p or min-p cut
        config.do_sample, config.temperature, config.top_k, config.top_p = True, command["temperature"], 0, 1.0
    return config


def generate(pipeline: Any, eos: int, command: dict[str, Any]) -> dict[str, Any]:
    import openvino_genai

    requests = command["requests"]
    n = requests[0]["n"]
    if any(request["n"] != n for request in requests):
        return {"error": "every request of a call must have the same n"}
    inputs, config = padded_batch([request["ids"] for request in requests]), generation_config(command, n)
    start, cpu = time.perf_counter(), time.process_time()
    result = pipeline.generate(inputs, config)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    stopped = [reason == openvino_genai.GenerationFinishReason.STOP for reason in result.finish_reasons]
    samples = [finished(ids, eos, stop) for ids, stop in zip(result.tokens, stopped)]  # by prompt, in their order
    return {
        "outputs": [[ids for ids, _ in samples[i * n:(i + 1) * n]] for i in range(len(requests))],
        "finish": [[reason for _, reason in samples[i * n:(i + 1) * n]] for i in range(len(requests))],
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
    }


def finished(ids: list[int], eos: int, stopped: bool) -> tuple[list[int], str]:
    """A sample's tokens and finish reason as quench reports them: an EOS ends it as "eos", the EOS left out
    (`stopped`: the pipeline's finish reason is STOP, which only the EOS triggers here: no stop strings)."""
    ids = list(ids)
    if not stopped:
        return ids, "length"
    return (ids[:-1] if ids and ids[-1] == eos else ids), "eos"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gguf", required=True, help="the GGUF file the pipeline loads")
    parser.add_argument("--batch-size", type=int, required=True, help="most sequences decoded together (max_num_seqs)")
    parser.add_argument("--threads", type=int, default=1, help="INFERENCE_NUM_THREADS")
    args = parser.parse_args()
    answers = protocol_stream()
    pipeline = build_pipeline(args)
    answers.write(json.dumps({"ready": True}) + "\n")
    eos = pipeline.get_generation_config().eos_token_id
    serve(pipeline, lambda model, command: generate(model, eos, command), sys.stdin, answers)


if __name__ == "__main__":
    main()
