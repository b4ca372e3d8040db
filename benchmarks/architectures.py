"""quench against Hugging Face `generate` on any model, side by side in one run: greedy, HumanEval prompts.

    python benchmarks/architectures.py --model gemma3-270m --threads 1 2
    python benchmarks/architectures.py --model gemma3-270m --threads 1 --profile     # also: layers vs head per step

Per thread count, both backends generate the same greedy samples (the first --problems HumanEval prompts in the
model's prompt format, --max-new-tokens each, batch --batch-size), HF first then quench, --repeats times. Printed:
wall and CPU seconds, tokens per wall second, quench's speed against HF's of the same round by wall time and by CPU
time of this process (on a machine shared with other jobs, wall time depends on the neighbours; with one thread
CPU time is what an idle core would take), which runner quench chose (the fast path or the generic one), and how
many samples have the same tokens in both.
--profile times one batch decode step of quench's runner at a --profile-context-token context: the decoder layers
and the LM head apart (medians of interleaved calls).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass

import torch

from quench.datasets import load_humaneval
from quench.engine.backend import QuenchBackend
from quench.engine.config import EngineConfig
from quench.engine.hf_backend import HFBackend
from quench.engine.types import GenerationRequest, SamplingParams
from quench.errors import QuenchError
from quench.models import load_model
from quench.models.loading import check_dtype, check_model
from quench.models.prompts import encode_prompt


@dataclass(frozen=True)
class Run:
    backend: str
    threads: int
    seconds: float
    cpu_seconds: float
    tokens: int
    outputs: dict[str, tuple[int, ...]]

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="gemma3-270m", help="a preset, a Hugging Face directory or a .gguf file")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--problems", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, nargs="+", default=[1])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--profile", action="store_true", help="also time the layers and the head of one decode step")
    parser.add_argument("--profile-context", type=int, default=256)
    args = parser.parse_args(argv)
    for name in ("problems", "batch_size", "max_new_tokens", "repeats", "profile_context"):
        if getattr(args, name) < 1:
            parser.exit(2, f"error: --{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}\n")
    if any(threads < 1 for threads in args.threads):
        parser.exit(2, f"error: --threads must be at least 1, got {args.threads}\n")
    try:
        check_model(args.model)
        check_dtype(args.dtype)
    except QuenchError as error:
        parser.exit(2, f"error: {error}\n")
    return args


def measure(name: str, backend, requests: list[GenerationRequest], sampling: SamplingParams, threads: int) -> Run:
    torch.set_num_threads(threads)
    start, cpu_start = time.perf_counter(), time.process_time()
    results = list(backend.generate(requests, sampling))
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    tokens = sum(len(r.token_ids) + (r.finish_reason == "eos") for r in results)  # EOS counts as generated
    return Run(name, threads, seconds, cpu_seconds, tokens, {r.key: tuple(r.token_ids) for r in results})


def profile_step(backend: QuenchBackend, batch: int, context: int, threads: int, repeats: int = 9) -> str:
    """Median ms of one decode step's decoder layers and of its LM head (greedy), fast path only."""
    runner = backend.runner
    if not hasattr(runner, "_hidden_packed"):
        return "profile: the generic path runs Hugging Face's forward whole (no split)"
    torch.set_num_threads(threads)
    generator = torch.Generator().manual_seed(0)
    cache = runner.new_cache(batch, context + 8)
    prompt = torch.randint(3, runner.vocab_size, (batch, context), generator=generator)
    runner.forward(cache, prompt, torch.zeros(batch, dtype=torch.long), logits_at=torch.full((batch,), context - 1))
    start = torch.full((batch,), context, dtype=torch.long)
    step = torch.randint(3, runner.vocab_size, (batch, 1), generator=generator)
    layers, head = [], []
    with torch.inference_mode():
        for _ in range(repeats):
            began = time.perf_counter()
            h, _, _ = runner._hidden_packed(cache, step, start, None)  # (B, Dm)
            middle = time.perf_counter()
            runner._head_argmax(h)
            layers.append(middle - began)
            head.append(time.perf_counter() - middle)
    ms = lambda values: 1000 * statistics.median(values)  # noqa: E731
    return (f"profile ({threads} thread(s), batch {batch}, context {context}): decoder layers {ms(layers):.1f} ms, "
            f"LM head {ms(head):.1f} ms per decode step")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    loaded = load_model(args.model, dtype=args.dtype)
    requests = [GenerationRequest(p.task_id, encode_prompt(loaded, p.prompt)) for p in load_humaneval()[: args.problems]]
    sampling = SamplingParams(max_new_tokens=args.max_new_tokens)
    hf = HFBackend(loaded.model, loaded.tokenizer, args.batch_size)
    quench = QuenchBackend(loaded.model, loaded.tokenizer, EngineConfig(batch_size=args.batch_size))
    lengths = [len(r.prompt_ids) for r in requests]
    print(f"{args.model} in {args.dtype}: {len(requests)} HumanEval prompts ({min(lengths)}-{max(lengths)} tokens), "
          f"batch {args.batch_size}, {args.max_new_tokens} new tokens, greedy; quench runs {type(quench.runner).__name__}")
    print("| threads | round | hf s (CPU s) | quench s (CPU s) | hf tok/s | quench tok/s | quench vs hf (wall) | (CPU) | same tokens |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for threads in args.threads:
        for round_index in range(args.repeats):
            reference = measure("hf", hf, requests, sampling, threads)
            ours = measure("quench", quench, requests, sampling, threads)
            same = sum(ours.outputs[key] == tokens for key, tokens in reference.outputs.items())
            print(f"| {threads} | {round_index + 1} | {reference.seconds:.1f} ({reference.cpu_seconds:.1f}) | "
                  f"{ours.seconds:.1f} ({ours.cpu_seconds:.1f}) | {reference.rate:.1f} | {ours.rate:.1f} | "
                  f"{reference.seconds / ours.seconds:.2f}x | {reference.cpu_seconds / ours.cpu_seconds:.2f}x | "
                  f"{same}/{len(reference.outputs)} |", flush=True)
    if args.profile:
        for threads in args.threads:
            print(profile_step(quench, args.batch_size, args.profile_context, threads))


if __name__ == "__main__":
    sys.exit(main())
