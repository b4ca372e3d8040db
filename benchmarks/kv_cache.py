"""bfloat16 KV caches against float32 ones under the default model's GGUF weights (`--kv-cache`), side by side.

    python benchmarks/kv_cache.py --batch-sizes 1 8 64 --max-new-tokens 384 --rounds 3
    python benchmarks/kv_cache.py --batch-sizes 64 --processes 2     # two engines sharing the memory bus
    python benchmarks/kv_cache.py --agreement 32                     # no timing: how far the logits move

Speed: the model loads once (`--weights auto`) and one engine per cache dtype runs on it, alternating generation
by generation (the order flips every round); greedy, the first B HumanEval prompts in the chat template, N new
tokens per row with EOS ignored, one thread per process. Printed per batch size: each one's median tokens/s and
the median of the per-generation ratios. `--processes P` runs P copies of the measurement at once, as
`quench robustness` runs its engines on a machine's cores, and prints each copy's lines.

Agreement: for the first P HumanEval prompts, the float32-cache engine's greedy answer (N tokens), then the prompt
and that answer fed in one prefill to each cache dtype's runner: the share of answer positions whose top token is
the same, and the largest logit difference. The same against `--weights gguf` (float32 activations, float32
caches) puts the number beside the difference between the two GGUF modes.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import torch

from quench.datasets import load_humaneval
from quench.engine.backend import QuenchBackend
from quench.engine.config import EngineConfig
from quench.engine.runners.make import make_runner
from quench.engine.types import GenerationRequest, SamplingParams
from quench.models import encode_prompt, load_model

CACHES = ("float32", "bfloat16")


def speed(loaded, batch_sizes: list[int], new_tokens: int, rounds: int) -> None:
    prompts = load_humaneval()
    for batch in batch_sizes:
        requests = [GenerationRequest(p.task_id, encode_prompt(loaded, p.prompt)) for p in prompts[:batch]]
        engines = {kv: QuenchBackend(loaded.model, loaded.tokenizer, EngineConfig(batch_size=batch, kv_cache=kv))
                   for kv in CACHES}
        sampling = SamplingParams(max_new_tokens=new_tokens, ignore_eos=True)
        walls: dict[str, list[float]] = {kv: [] for kv in CACHES}
        for kv, engine in engines.items():  # warm: the caches' first allocation and the kernels' first calls
            list(engine.generate(requests[:1], SamplingParams(max_new_tokens=4)))
        for round_ in range(rounds):
            for kv in CACHES if round_ % 2 == 0 else CACHES[::-1]:
                began = time.perf_counter()
                list(engines[kv].generate(requests, sampling))
                walls[kv].append(time.perf_counter() - began)
        tokens = batch * new_tokens
        rates = "  ".join(f"{kv}: {tokens / statistics.median(walls[kv]):7.1f} tok/s" for kv in CACHES)
        ratio = statistics.median(a / b for a, b in zip(walls["float32"], walls["bfloat16"]))
        print(f"batch {batch:3d}, {new_tokens} new tokens per row: {rates}   bfloat16 / float32 caches {ratio:.3f}x",
              flush=True)


@torch.inference_mode()
def logits_of(runner, ids: list[int]) -> torch.Tensor:
    """ids fed in one prefill -> float32 logits at every position, (S, V)."""
    cache = runner.new_cache(1, len(ids) + 1)
    return runner.forward(cache, torch.tensor([ids]), torch.zeros(1, dtype=torch.long))[0]


def agreement(loaded, prompts: int, new_tokens: int) -> None:
    float_sums = load_model(weights="gguf", notify=lambda _: None)
    runners = {"gguf-int8, bfloat16 caches": make_runner(loaded.model, EngineConfig(kv_cache="bfloat16")),
               "gguf, float32 caches": make_runner(float_sums.model, EngineConfig(kv_cache="float32"))}
    reference = make_runner(loaded.model, EngineConfig(kv_cache="float32"))
    engine = QuenchBackend(loaded.model, loaded.tokenizer, EngineConfig(batch_size=8, kv_cache="float32"))
    requests = [GenerationRequest(p.task_id, encode_prompt(loaded, p.prompt)) for p in load_humaneval()[:prompts]]
    answers = {r.key: list(r.token_ids) for r in engine.generate(requests, SamplingParams(max_new_tokens=new_tokens))}
    same = {name: 0 for name in runners}
    largest = {name: 0.0 for name in runners}
    positions = 0
    for request in requests:
        ids = list(request.prompt_ids) + answers[request.key]
        answer = slice(len(request.prompt_ids) - 1, len(ids) - 1)  # the positions that predict the answer's tokens
        want = logits_of(reference, ids)[answer]  # (A, V)
        positions += want.shape[0]
        for name, runner in runners.items():
            got = logits_of(runner, ids)[answer]
            same[name] += int((got.argmax(-1) == want.argmax(-1)).sum())
            largest[name] = max(largest[name], float((got - want).abs().max()))
    print(f"{prompts} HumanEval prompts, {positions} answer positions of the gguf-int8 float32-cache answers:")
    for name in runners:
        print(f"  {name:>28}: same top token at {same[name] / positions:.2%} of positions, "
              f"largest logit difference {largest[name]:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--max-new-tokens", type=int, default=384)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--processes", type=int, default=1, help="copies of the speed measurement run at once")
    parser.add_argument("--agreement", type=int, default=0, metavar="P", help="no timing: logits on P prompts")
    args = parser.parse_args()
    for name in ("max_new_tokens", "rounds", "processes"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.agreement < 0 or any(batch < 1 for batch in args.batch_sizes):
        parser.error("--agreement and --batch-sizes must not be negative, and a batch size is at least 1")
    torch.set_num_threads(1)
    others = []
    if args.processes > 1 and not args.agreement:
        copy = [sys.executable, *sys.argv, "--processes", "1"]
        others = [subprocess.Popen(copy, stdout=subprocess.PIPE, text=True) for _ in range(args.processes - 1)]
    loaded = load_model(weights="auto", notify=lambda _: None)
    if args.agreement:
        agreement(loaded, args.agreement, args.max_new_tokens)
        return
    if others:
        print("process 1:")
    speed(loaded, args.batch_sizes, args.max_new_tokens, args.rounds)
    for index, other in enumerate(others, start=2):
        out, _ = other.communicate()
        print(f"process {index}:\n{out}", end="")


if __name__ == "__main__":
    main()
