"""llama.cpp as a `benchmarks/generation.py` backend: llama-cpp-python's `Llama` on a GGUF file, one sequence at a time,
driven over stdin/stdout.

Run with the Python of a virtual environment that has the `llama_cpp` package (quench need not be installed there):

    /path/to/llamacpp-venv/bin/python benchmarks/llamacpp_worker.py --gguf FILE --threads 1 [--llama-lib DIR]

--llama-lib: the directory of a libllama.so built from the same sources (LLAMA_CPP_LIB_PATH), where the package
was not built with its own. The Python API decodes one sequence at a time (no batch): a call's requests and
samples run one after another; the samples of one request share its prompt's keys/values (the prompt is evaluated
once per request, as a batch's samples share it in the other backends). Greedy is llama.cpp's greedy sampler;
sampling is its temperature and distribution samplers alone (no top-k, top-p or min-p cut), seeded per sample.
The protocol is `benchmarks/vllm_worker.py`'s (one JSON line each way):

    {"op": "generate", "requests": [{"ids": [...], "n": 1}], "temperature": 0.0, "max_tokens": 128,
     "min_tokens": 0, "ignore_eos": true, "seed": 1}
    -> {"outputs": [[[ids]]], "finish": [["length"]], "seconds": wall, "cpu_seconds": this process's CPU time}
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from worker_protocol import protocol_stream, serve

# benchmarks/ holds scripts whose names libraries may import as modules: past worker_protocol, this directory is no
# place to import from
sys.path = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

CONTEXT = 2048  # positions: a HumanEval prompt in the chat template and its new tokens fit


def build_model(args: argparse.Namespace) -> Any:
    if args.llama_lib:
        os.environ["LLAMA_CPP_LIB_PATH"] = args.llama_lib  # read when llama_cpp is imported
    from llama_cpp import Llama

    return Llama(model_path=args.gguf, n_ctx=CONTEXT, n_batch=512, n_threads=args.threads,
                 n_threads_batch=args.threads, seed=args.seed, verbose=False)


def sample_tokens(llm: Any, prompt: list[int], command: dict[str, Any], seed: int) -> tuple[list[int], str]:
    """One sample of a prompt whose keys/values may already sit in the context (the generator evaluates only what
    it lacks): its tokens and finish reason as quench reports them (an EOS ends it as "eos", left out)."""
    llm.set_seed(seed)
    temperature = command["temperature"]
    tokens: list[int] = []
    eos = llm.token_eos()
    for token in llm.generate(prompt, temp=temperature, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.0):
        if token == eos and not command.get("ignore_eos", False) and len(tokens) >= command.get("min_tokens", 0):
            return tokens, "eos"
        tokens.append(token)
        if len(tokens) == command["max_tokens"]:
            return tokens, "length"
    return tokens, "length"


def generate(llm: Any, command: dict[str, Any]) -> dict[str, Any]:
    outputs, finish = [], []
    start, cpu = time.perf_counter(), time.process_time()
    for request in command["requests"]:
        llm.reset()  # nothing carried over from another request
        samples = [sample_tokens(llm, request["ids"], command, command.get("seed", 1) + index) for index in range(request["n"])]
        outputs.append([ids for ids, _ in samples])
        finish.append([reason for _, reason in samples])
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    return {"outputs": outputs, "finish": finish, "seconds": seconds, "cpu_seconds": cpu_seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gguf", required=True, help="the GGUF file")
    parser.add_argument("--threads", type=int, default=1, help="n_threads and n_threads_batch")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--llama-lib", help="a directory holding libllama.so (LLAMA_CPP_LIB_PATH)")
    args = parser.parse_args()
    answers = protocol_stream()
    llm = build_model(args)
    answers.write(json.dumps({"ready": True}) + "\n")
    serve(llm, generate, sys.stdin, answers)


if __name__ == "__main__":
    main()
