"""`quench draft train`: distil a draft model for speculative decoding (resumable; see docs/draft.md)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from quench.cli import console, validate
from quench.errors import QuenchError
from quench.models import DEFAULT_PRESET
from quench.training.distill_config import DistillConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("draft", help="draft models for speculative decoding")
    verbs = parser.add_subparsers(dest="draft_command", required=True)
    train = verbs.add_parser("train", help="distil a small draft for a target model (resumable)")
    defaults = DistillConfig()
    train.add_argument("--model", default=DEFAULT_PRESET, help="the target: preset, HF model directory, or .gguf")
    train.add_argument("--dtype", default="auto", help="auto, bfloat16, float32 (bfloat16 is ~2x faster where the CPU has it)")
    train.add_argument("--out", type=Path, default=None, help="working directory (default: runs/draft-<model>)")
    train.add_argument("--layers", default=",".join(map(str, defaults.source_layers)),
                       help="target layers the draft starts from, e.g. '0,-1' (first and last)")
    train.add_argument("--head-tokens", type=int, default=defaults.head_tokens,
                       help="draft only among the N most frequent answer tokens (0 = whole vocabulary)")
    train.add_argument("--prompts", type=int, default=defaults.prompts, help="MBPP train+validation prompts to answer")
    train.add_argument("--stdlib", type=int, default=defaults.stdlib_functions,
                       help="standard-library functions to add as real code")
    train.add_argument("--stdlib-prompts", type=int, default=defaults.stdlib_prompts,
                       help="further standard-library signatures + docstrings for the target to answer")
    train.add_argument("--stdlib-labels", default=defaults.stdlib_labels, choices=["real", "teacher"],
                       help="label stdlib code with its own next tokens (free) or the target's top-k (a teacher pass)")
    train.add_argument("--sampled-answers", type=int, default=defaults.sampled_answers,
                       help="further answers per prompt, sampled at --sample-temperature (more target-written code)")
    train.add_argument("--sample-temperature", type=float, default=defaults.sample_temperature,
                       help="temperature of the further sampled answers")
    train.add_argument("--max-new-tokens", type=int, default=defaults.max_new_tokens,
                       help="tokens the target writes per answer, at most")
    train.add_argument("--max-tokens", type=int, default=defaults.max_tokens, help="tokens per training sequence")
    train.add_argument("--epochs", type=int, default=defaults.epochs, help="passes over the target's answers")
    train.add_argument("--batch-size", type=int, default=defaults.batch_size, help="sequences per training step")
    train.add_argument("--lr", type=float, default=defaults.learning_rate, help="learning rate")
    train.add_argument("--top-k", type=int, default=defaults.top_k, help="teacher log-probabilities kept per position")
    train.add_argument("--seed", type=int, default=defaults.seed, help="seed of the data order and sampling")
    train.set_defaults(handler=run)


def parse_layers(spec: str) -> tuple[int, ...]:
    try:
        layers = tuple(int(part) for part in spec.split(",") if part.strip())
    except ValueError:
        raise QuenchError(f"--layers must be comma-separated integers, got {spec!r}") from None
    if not layers:
        raise QuenchError("--layers must name at least one layer")
    return layers


def config_from_args(args: argparse.Namespace) -> DistillConfig:
    try:
        return DistillConfig(
            source_layers=parse_layers(args.layers), head_tokens=args.head_tokens, prompts=args.prompts,
            stdlib_functions=args.stdlib, stdlib_prompts=args.stdlib_prompts, stdlib_labels=args.stdlib_labels,
            max_new_tokens=args.max_new_tokens, max_tokens=args.max_tokens,
            sampled_answers=args.sampled_answers, sample_temperature=args.sample_temperature,
            top_k=args.top_k, epochs=args.epochs, batch_size=args.batch_size, learning_rate=args.lr, seed=args.seed,
        )
    except ValueError as err:
        raise QuenchError(str(err)) from None


class BarProgress:
    """One tqdm bar per phase (answers, teacher, train), with the training loss in the postfix."""

    def __init__(self) -> None:
        self.bar = None  # the open tqdm bar

    def begin(self, phase: str, total: int) -> None:
        self.bar = console.bar(total=total, desc=phase, smoothing=0.1)

    def advance(self, count: int = 1, **info: float) -> None:
        if self.bar is not None:
            self.bar.update(count)
            if info:
                self.bar.set_postfix({k: f"{v:.3f}" for k, v in info.items()}, refresh=False)

    def end(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    validate.check_model_args(args)
    out = args.out or Path("runs") / f"draft-{Path(args.model).name}"
    validate.check_out_dir(out)
    from quench.training.distill import distill

    started = time.perf_counter()
    target = console.load_model(args.model, args.dtype)
    progress = BarProgress()
    try:
        result = distill(target, out, config, progress)
    finally:
        progress.end()
    minutes = (time.perf_counter() - started) / 60
    print(f"draft: {result.draft_path} ({result.draft_path.stat().st_size / 2**20:.1f} MB, {result.steps} steps, "
          f"{result.train_examples} training / {result.heldout_examples} held-out examples, {minutes:.1f} min)")
    print(f"held-out KL {result.before.kl:.3f} -> {result.after.kl:.3f}; "
          f"argmax agreement {result.before.agreement:.3f} -> {result.after.agreement:.3f}")
    for source, figures in result.after_by_source:
        print(f"  {source}: KL {figures.kl:.3f}, agreement {figures.agreement:.3f}")
    print(f"use it: --draft {result.draft_path}")
    return 0
