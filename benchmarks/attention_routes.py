"""The fixed attention (the same bits on every CPU, batch-invariant runners) beside the build's fastest attention
(the AVX512-BF16 head-64 kernel where the CPU has it), one layer of the default model's shape, side by side.

    python benchmarks/attention_routes.py [--threads 1] [--repeats 200]

Prints, per case (rows x new tokens per row, keys each query sees), the best time of each route and their ratio.
On builds without AVX512-BF16 both routes run the fixed kernel (ratio about 1).
"""

from __future__ import annotations

import argparse
import time

import torch

from quench.engine.kernels import native

HEADS, KV_HEADS, HEAD_DIM, MAX_LEN = 9, 3, 64, 1024  # SmolLM2-135M's attention
CASES = ((1, 1, 300), (8, 1, 300), (16, 1, 300), (64, 1, 300), (8, 1, 1000), (1, 200, 0))  # rows, new tokens, keys already cached


def best_ms(rows: int, new: int, cached: int, fixed: bool, repeats: int) -> float:
    generator = torch.Generator().manual_seed(0)
    qkv = torch.randn(rows * new, HEADS + 2 * KV_HEADS, HEAD_DIM, generator=generator).bfloat16()
    keys = torch.randn(rows, KV_HEADS, MAX_LEN, HEAD_DIM, generator=generator).bfloat16()
    values = torch.randn(rows, KV_HEADS, MAX_LEN, HEAD_DIM, generator=generator).bfloat16()
    cos = torch.randn(MAX_LEN, HEAD_DIM, generator=generator).bfloat16()
    sin = torch.randn(MAX_LEN, HEAD_DIM, generator=generator).bfloat16()
    start, offsets = torch.full((rows,), cached), torch.arange(rows + 1) * new
    best = float("inf")
    for _ in range(repeats + 1):
        began = time.perf_counter()
        native.rope_attend(qkv, keys, values, cos, sin, start, offsets, HEADS, 0.125, amx=False, fixed=fixed)
        best = min(best, time.perf_counter() - began)
    return best * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"native level: {native.build_result().march}, {args.threads} thread(s), best of {args.repeats}")
    print("rows x new, keys | fastest (ms) | fixed (ms) | fixed / fastest")
    for rows, new, cached in CASES:
        repeats = max(3, args.repeats // (rows * new))
        fast = best_ms(rows, new, cached, False, repeats)
        fixed = best_ms(rows, new, cached, True, repeats)
        print(f"{rows} x {new}, {cached + new} | {fast:.3f} | {fixed:.3f} | {fixed / fast:.2f}x")


if __name__ == "__main__":
    main()
