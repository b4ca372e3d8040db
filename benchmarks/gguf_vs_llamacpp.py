"""quench's engine on a GGUF file's blocks as stored against llama.cpp on the same file, side by side in one run.

llama.cpp: `llama-batched-bench` (decode and prefill tokens/s of B parallel sequences of P-token prompts and
T new tokens) from the llama.cpp sources in the llama-cpp-python sdist, built with cmake:

    pip download --no-deps --no-binary :all: llama-cpp-python && tar xzf llama_cpp_python-*.tar.gz
    cmake -S llama_cpp_python-*/vendor/llama.cpp -B build -DGGML_NATIVE=ON -DLLAMA_CURL=OFF
    cmake --build build -j2 --target llama-batched-bench

quench: the GGUF's blocks executed by quench.engine.kernels.quant, in --weights' mode (gguf-int8, the CLI's default:
8-bit activations and integer sums, llama.cpp's scheme; gguf: float32 activations), greedy, EOS ignored,
B HumanEval prompts in the chat template; decode tokens/s is B (T - 1) new tokens over the wall time of a
T-token call minus that of a 1-token call; prefill tokens/s is the prompts' tokens over that 1-token call.
Each system gets the same threads; rounds alternate between them; the best of --repeats is kept.

    .venv/bin/python benchmarks/gguf_vs_llamacpp.py --llama-bin build/bin --threads 1 2 --batch-sizes 1 8 16
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import torch

from gguf_weights import backend, timed
from quench.datasets import load_humaneval
from quench.engine.kernels import native, quant
from quench.engine.types import GenerationRequest
from quench.models import encode_prompt, load_model
from quench.models.presets import PRESETS, preset_gguf_parts


def llama_cpp(binary: Path, gguf: Path, threads: int, batch: int, prompt: int, new: int) -> tuple[float, float]:
    """(decode tok/s, prefill tok/s) of llama-batched-bench for one configuration."""
    command = [str(binary), "-m", str(gguf), "-t", str(threads), "-tb", str(threads), "-c", str(batch * (prompt + new) + 64),
               "-b", "2048", "-ub", "512", "-npp", str(prompt), "-ntg", str(new), "-npl", str(batch),
               "--output-format", "jsonl"]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    row = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))
    return float(row["speed_tg"]), float(row["speed_pp"])


def quench_rates(system, requests, new: int) -> tuple[float, float]:
    first, _ = timed(system, requests, 1)
    whole, _ = timed(system, requests, new)
    prompt_tokens = sum(len(r.prompt_ids) for r in requests)
    return len(requests) * (new - 1) / (whole - first), prompt_tokens / first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llama-bin", type=Path, required=True, help="the directory holding llama-batched-bench")
    parser.add_argument("--preset", default="smollm2-135m-instruct", choices=sorted(PRESETS))
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 16])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--weights", default="gguf-int8", choices=quant.MODES, help="quench's GGUF mode")
    args = parser.parse_args()
    binary = args.llama_bin / "llama-batched-bench"
    if not binary.is_file():
        parser.error(f"--llama-bin: {binary} does not exist")
    parts = preset_gguf_parts(PRESETS[args.preset])
    if len(parts) != 1:
        parser.error(f"--preset {args.preset}: its GGUF comes in {len(parts)} parts; join them for llama.cpp first")
    loaded = load_model(args.preset, weights="gguf")
    gguf_weights = quant.gguf_weights_of(loaded.model)
    problems = load_humaneval()[: max(args.batch_sizes)]
    print(f"{parts[0].name}; quench --weights {args.weights}, native build {native.build_result().march}; "
          f"torch {torch.__version__}")
    print("| batch | threads | decode tok/s quench / llama.cpp | ratio | prefill tok/s quench / llama.cpp | ratio |")
    print("|---:|---:|---:|---:|---:|---:|")
    for threads in args.threads:
        torch.set_num_threads(threads)
        for batch in args.batch_sizes:
            requests = [GenerationRequest(p.task_id, encode_prompt(loaded, p.prompt)) for p in problems[:batch]]
            prompt = round(sum(len(r.prompt_ids) for r in requests) / batch)
            system = backend(loaded, gguf_weights, args.weights, batch)
            ours, theirs = (0.0, 0.0), (0.0, 0.0)
            for _ in range(args.repeats):
                mine = quench_rates(system, requests, args.max_new_tokens)
                peer = llama_cpp(binary, parts[0], threads, batch, prompt, args.max_new_tokens)
                ours = (max(ours[0], mine[0]), max(ours[1], mine[1]))
                theirs = (max(theirs[0], peer[0]), max(theirs[1], peer[1]))
            print(f"| {batch} | {threads} | {ours[0]:.1f} / {theirs[0]:.1f} | {ours[0] / theirs[0]:.2f}x | "
                  f"{ours[1]:.0f} / {theirs[1]:.0f} | {ours[1] / theirs[1]:.2f}x |")


if __name__ == "__main__":
    main()
