"""The greedy head alone: screened in int8 (quench.engine.kernels.screen) against the whole bfloat16 head.

    python benchmarks/head.py                      # rows 1 .. 64, one thread
    python benchmarks/head.py --rows 8 16 --threads 2

Hidden states are real: the default model's final-norm states over its own greedy answers to a few
HumanEval prompts. Per row count, both ways run interleaved in one process (best of --repeats each, ms
per call), and the screen's tokens are checked against the whole head's row by row (the AVX512
kernel's bits, what the screen promises). Also printed: how many tokens per row the screen computed
exactly (its candidates), mean and max.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from quench.datasets import load_humaneval
from quench.engine.kernels import native
from quench.engine.kernels.screen import KERNEL_MAX_ROWS, screen_head
from quench.models import load_model
from quench.models.prompts import encode_prompt


def answer_states(loaded, prompts: int, new_tokens: int) -> torch.Tensor:
    """(P, K) final-norm hidden states over prompts + greedy answers, bfloat16."""
    states = []
    for problem in load_humaneval()[:prompts]:
        ids = torch.tensor([encode_prompt(loaded, problem.prompt)])
        out = loaded.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, do_sample=False)
        with torch.no_grad():
            states.append(loaded.model(out, output_hidden_states=True).hidden_states[-1][0])
    return torch.cat(states).contiguous()


def best_ms(call, x: torch.Tensor, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call(x)
        times.append(time.perf_counter() - start)
    return 1000 * min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--prompts", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    loaded = load_model(dtype="bfloat16")
    weight = loaded.model.lm_head.weight.detach()
    packed = native.pack_small_gemm(weight)
    screen = screen_head(weight, packed)
    if screen is None:
        raise SystemExit("the screened head needs AMX int8 tiles and AVX512-BF16 (this CPU or kernel has not)")
    vocab = weight.shape[0]
    states = answer_states(loaded, args.prompts, 96)
    amx = native.use_amx(native.KernelConfig.from_env())  # the whole head as the engine runs it (QUENCH_AMX=0: AVX512)
    whole = lambda x: native.argmax(native.small_gemm(x, packed, vocab, amx=amx))  # noqa: E731
    print(f"{states.shape[0]} hidden states; threads {args.threads}")
    screened = lambda x: screen.argmax(x, max_rows=KERNEL_MAX_ROWS)  # noqa: E731  (past the engine's 16-row cap too)
    counts = torch.zeros(states.shape[0], dtype=torch.int32)
    for first in range(0, states.shape[0], KERNEL_MAX_ROWS):
        rows = slice(first, first + KERNEL_MAX_ROWS)
        screen.argmax(states[rows].contiguous(), counts=counts[rows], max_rows=KERNEL_MAX_ROWS)
    print(f"tokens computed exactly per row: mean {counts.float().mean():.1f}, max {int(counts.max())}")
    print("| rows | whole head ms | screened ms | ratio | same tokens as AVX512 row by row |")
    print("|---:|---:|---:|---:|---|")
    for rows in args.rows:
        x = states[:rows].contiguous()
        ratios, wholes, screens = [], [], []
        for _ in range(3):  # interleaved rounds
            w, s = best_ms(whole, x, args.repeats), best_ms(screened, x, args.repeats)
            wholes.append(w)
            screens.append(s)
            ratios.append(w / s)
        reference = torch.stack([whole(x[i : i + 1].contiguous())[0] for i in range(rows)])
        same = bool(torch.equal(screened(x), reference))
        print(f"| {rows} | {min(wholes):.2f} | {min(screens):.2f} | {statistics.median(ratios):.2f}x | {same} |", flush=True)


if __name__ == "__main__":
    main()
