"""quench's native kernels against their PyTorch fallbacks on this CPU, side by side in one process.

    python benchmarks/native_kernels.py                    # batch 1 and 8, one thread
    python benchmarks/native_kernels.py --batch-sizes 8 --threads 2

The default model in bfloat16. "decode step": one token per row at position --position, the Llama
runner with every native kernel this CPU has (`quench doctor` lists them) against the same runner on
PyTorch's attention, norms and oneDNN's GEMMs (`native_attention=False`). "argmax": greedy argmax over
(batch, vocabulary) bfloat16 logits, the C kernel against torch.argmax. Rounds run interleaved; each
cell is the best of --repeats calls (contention only slows a call), the ratio the median over rounds.
A kernel pays where its ratio is above 1.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from quench.engine.kernels import native
from quench.engine.runners.forward_plan import plan_forward
from quench.engine.runners.llama import LlamaRunner
from quench.engine.kernels.native_report import kernel_report
from quench.models import load_model


def best_ms(call: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1000 * min(times)


def decode_step(runner: LlamaRunner, batch: int, position: int, seed: int) -> Callable[[], object]:
    """A prefilled cache of `position` tokens per row; the call feeds one more token per row (same slot each time)."""
    generator = torch.Generator().manual_seed(seed)
    prompt = torch.randint(100, 20000, (batch, position), generator=generator)
    cache = runner.new_cache(batch, position + 1)
    runner.forward(cache, prompt, torch.zeros(batch, dtype=torch.long))
    step, start = prompt[:, -1:], torch.full((batch,), position)
    return lambda: runner.forward(cache, step, start)


def side_by_side(name: str, fast: Callable[[], object], slow: Callable[[], object], rounds: int, repeats: int) -> None:
    fast_ms, slow_ms, ratios = [], [], []
    for _ in range(rounds):
        f, s = best_ms(fast, repeats), best_ms(slow, repeats)
        fast_ms.append(f)
        slow_ms.append(s)
        ratios.append(s / f)
    print(f"| {name} | {min(fast_ms):.2f} | {min(slow_ms):.2f} | {statistics.median(ratios):.2f}x |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--position", type=int, default=256, help="tokens already in each row's cache")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if native._library() is None:
        raise SystemExit(f"no native kernels here: {native.build_result().reason}")
    on = [k.name for k in kernel_report(native.build_result(), native.KernelConfig.from_env()) if k.active]
    print(f"native kernels on: {'; '.join(on)}; threads {args.threads}")
    model = load_model(dtype="bfloat16").model
    fast = LlamaRunner(model, plan_forward(model, kernels=native.KernelConfig.from_env()))
    slow = LlamaRunner(model, plan_forward(model, native_attention=False))  # PyTorch attention and norms, oneDNN GEMMs
    print("| call | native ms | PyTorch ms | PyTorch / native |")
    print("|---|---:|---:|---:|")
    for batch in args.batch_sizes:
        steps = [decode_step(runner, batch, args.position, seed=batch) for runner in (fast, slow)]
        side_by_side(f"decode step, batch {batch}", *steps, args.rounds, args.repeats)
        logits = torch.randn(batch, model.config.vocab_size).to(torch.bfloat16)
        side_by_side(f"argmax ({batch}, {logits.shape[1]})", lambda x=logits: native.argmax(x),
                     lambda x=logits: x.argmax(dim=-1), args.rounds, args.repeats * 10)


if __name__ == "__main__":
    main()
