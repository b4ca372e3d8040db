"""What transparent huge pages give the engine: the default preset on its GGUF blocks (gguf-int8, the layers in C)
with its KV caches and packed weights on huge pages (engine/kernels/huge_pages.py, the default) against the same
engine with both in ordinary 4 KB pages, in interleaved rounds in one process.

Decode tokens/s: B (T - 1) new tokens over the wall time of a T-token call minus that of a 1-token call, EOS
ignored, the first B HumanEval prompts in the chat template; the best of --rounds. The tokens of the two engines
must be equal (storage only).

    .venv/bin/python benchmarks/huge_pages.py --batch-sizes 1 64 --threads 1
"""

from __future__ import annotations

import argparse

import torch

from gguf_weights import backend, timed
from quench.datasets import load_humaneval
from quench.engine.kernels import huge_pages, quant
from quench.engine.types import GenerationRequest
from quench.models import encode_prompt, load_model


def ordinary_zeros(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return torch.zeros(shape, dtype=dtype)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    loaded = load_model(weights="gguf")
    gguf_weights = quant.gguf_weights_of(loaded.model)
    allocators = {"huge pages": huge_pages.zeros, "4 KB pages": ordinary_zeros}
    print(f"| batch | threads | decode tok/s, huge pages | decode tok/s, 4 KB pages | ratio | prefill + 1st token s (huge; 4 KB) | same tokens |")
    print("|---:|---:|---:|---:|---:|---|---|")
    for batch_size in args.batch_sizes:
        problems = load_humaneval()[:batch_size]
        requests = [GenerationRequest(p.task_id, encode_prompt(loaded, p.prompt)) for p in problems]
        engines = {}
        for name, allocate in allocators.items():
            huge_pages.zeros = allocate  # the packed weights are made now, the caches at each call
            engines[name] = backend(loaded, gguf_weights, "gguf-int8", batch_size)
        best = {name: (float("inf"), float("inf")) for name in engines}
        tokens = {}
        for _ in range(args.rounds):
            for name, engine in engines.items():
                huge_pages.zeros = allocators[name]
                first, _ = timed(engine, requests, 1)
                whole, tokens[name] = timed(engine, requests, args.max_new_tokens)
                best[name] = (min(best[name][0], whole - first), min(best[name][1], first))
        huge_pages.zeros = allocators["huge pages"]
        rate = {name: batch_size * (args.max_new_tokens - 1) / seconds for name, (seconds, _) in best.items()}
        huge, small = rate["huge pages"], rate["4 KB pages"]
        print(f"| {batch_size} | {args.threads} | {huge:.1f} | {small:.1f} | {huge / small:.2f}x | "
              f"{best['huge pages'][1]:.3f}; {best['4 KB pages'][1]:.3f} | {tokens['huge pages'] == tokens['4 KB pages']} |")


if __name__ == "__main__":
    main()
