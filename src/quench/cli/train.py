"""`quench train`: robust fine-tuning (CodeFort strategies), LoRA or full, resumable, torchrun-ready."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from quench.cli import console, validate
from quench.cli.flags import add_unconfined_arg
from quench.cli.perturb import add_profile_arg
from quench.errors import QuenchError
from quench.models import DEFAULT_PRESET
from quench.training.config import (
    AUGMENTING, DEFAULT_LORA_TARGETS, STRATEGIES, DataSettings, LoraSettings, LossWeights, TrainConfig, check_config,
    parse_strategies,
)

DEFAULT_CATEGORIES = "docstring,function_name,code_syntax,code_format"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train", help="fine-tune a model for robustness (data/batch augmentation, ALP, contrastive losses)",
        description="Several processes: torchrun --nproc_per_node N $(which quench) train ...")
    parser.add_argument("--model", default=DEFAULT_PRESET, help="preset, HF model directory, or .gguf file")
    parser.add_argument("--prompt-format", default=None, choices=["chat", "completion"],
                        help="how prompts are shown to the model while training (default: the preset's, else completion)")
    parser.add_argument("--device", default="cpu", help="torch device: cpu, cuda, cuda:1, ...")
    parser.add_argument("--dtype", default="float32", help="weights while training: float32 (default), bfloat16")
    parser.add_argument("--out", type=Path, required=True, help="output directory (model, state, logs)")
    parser.add_argument("--resume", action="store_true", help="continue the run saved in --out")
    parser.add_argument("--overwrite", action="store_true", help="start over in a non-empty --out")
    parser.add_argument("--strategy", default="none", help=f"comma-separated: {','.join(STRATEGIES)} (or none)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--lora", dest="lora", action="store_true", default=True, help="train LoRA adapters (default)")
    mode.add_argument("--full", dest="lora", action="store_false", help="train every weight")
    add_optimisation_args(parser)
    add_data_args(parser)
    add_loss_args(parser)
    parser.set_defaults(handler=run, needs_sandbox=needs_sandbox)


def needs_sandbox(args: argparse.Namespace) -> bool:
    """Whether the run checks perturbed variants in the sandbox (augmenting strategies, unless --no-validate)."""
    return bool(args.validate and parse_strategies(args.strategy) & AUGMENTING)


def add_optimisation_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--epochs", type=int, default=1, help="passes over the training problems")
    parser.add_argument("--lr", type=float, default=2e-4, help="peak learning rate (linear warm-up, then linear decay to 0)")
    parser.add_argument("--batch-size", type=int, default=4, help="examples per process and step (a pair counts once)")
    parser.add_argument("--max-length", type=int, default=512, help="longer sequences are left out")
    parser.add_argument("--warmup-ratio", type=float, default=0.05, help="share of the steps the learning rate warms up over")
    parser.add_argument("--weight-decay", type=float, default=0.0, help="AdamW weight decay")
    parser.add_argument("--grad-clip", type=float, default=1.0, help="gradient norm clipped to this (0: off)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the data order, the adapters' initial weights and dropout")
    parser.add_argument("--save-every", type=int, default=50, help="steps between resumable states")
    parser.add_argument("--stop-after", type=int, default=None, help="stop (resumable) after N steps of this run")
    parser.add_argument("--lora-rank", type=int, default=8, help="LoRA: rank of each adapter")
    parser.add_argument("--lora-alpha", type=int, default=16, help="LoRA: scale alpha / rank of the adapters' output")
    parser.add_argument("--lora-dropout", type=float, default=0.05, help="LoRA: dropout on the adapters' input")
    parser.add_argument("--lora-targets", default=",".join(DEFAULT_LORA_TARGETS),
                        help="LoRA: comma-separated projections to adapt")
    parser.add_argument("--lora-layers", type=int, default=None, help="adapt only the top N layers (faster backward)")


def add_data_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--splits", default="train,validation", help="MBPP splits to train on (never test)")
    parser.add_argument("--limit", type=int, default=None, help="keep the first N MBPP problems")
    parser.add_argument("--stdlib", type=int, default=0, help="add N functions with docstrings from the standard library")
    parser.add_argument("--categories", default=DEFAULT_CATEGORIES, help="perturbation categories to augment with")
    parser.add_argument("--transforms", default=None, help="perturbation names (overrides --categories)")
    parser.add_argument("--seeds", "--perturb-seeds", dest="perturb_seeds", type=int, default=1,
                        help="s: variants per randomised transformation, as in `quench robustness --seeds` "
                             "(--perturb-seeds: the same)")
    add_profile_arg(parser)
    parser.add_argument("--variants-per-example", type=int, default=1, help="da/mda: variants drawn per example and epoch")
    parser.add_argument("--no-validate", dest="validate", action="store_false",
                        help="keep variants without running their reference solution")
    add_unconfined_arg(parser)


def add_loss_args(parser: argparse.ArgumentParser) -> None:
    d = LossWeights()
    parser.add_argument("--alp-weight", type=float, default=d.alp, help="alp: weight of the logit distance between pairs")
    parser.add_argument("--seq-weight", type=float, default=d.seq, help="cl-seq: weight of the sequence-level contrastive loss")
    parser.add_argument("--tok-weight", type=float, default=d.tok, help="cl-tok: weight of the token-level contrastive loss")
    parser.add_argument("--seq-temperature", type=float, default=d.seq_temperature,
                        help="cl-seq: temperature of the cosine similarities")
    parser.add_argument("--tok-temperature", type=float, default=d.tok_temperature,
                        help="cl-tok: temperature of the cosine similarities")
    parser.add_argument("--tok-max-aligned", type=int, default=d.tok_max_aligned,
                        help="cl-tok: aligned tokens sampled per pair")


def split_list(spec: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in spec.split(",") if x.strip())


def transforms_from_args(args: argparse.Namespace) -> tuple[str, ...]:
    from quench.perturbations.catalog import names, perturbation_class

    if args.transforms:
        wanted = split_list(args.transforms)
        for name in wanted:
            perturbation_class(name)  # QuenchError naming an unknown transformation
        return wanted
    return tuple(names(split_list(args.categories), include_model_based=False))


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    lora = LoraSettings(args.lora_rank, args.lora_alpha, args.lora_dropout, split_list(args.lora_targets),
                        args.lora_layers) if args.lora else None
    data = DataSettings(split_list(args.splits), args.limit, args.stdlib, transforms_from_args(args),
                        args.perturb_seeds, args.variants_per_example, args.validate, args.profile)
    losses = LossWeights(args.alp_weight, args.seq_weight, args.tok_weight, args.seq_temperature,
                         args.tok_temperature, args.tok_max_aligned)
    return TrainConfig(args.model, parse_strategies(args.strategy), lora, args.epochs, args.lr, args.batch_size,
                       args.max_length, args.warmup_ratio, args.weight_decay, args.grad_clip, args.seed,
                       args.save_every, args.dtype, losses, data)


def run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    check_config(config)  # a bad configuration fails before the model is loaded
    if args.stop_after is not None and args.stop_after < 1:
        raise QuenchError(f"--stop-after must be at least 1, got {args.stop_after}")
    validate.check_model_args(args)
    validate.check_out_dir(args.out)
    from quench.perturbations.validate import SandboxRunner
    from quench.training import train, training_problems

    main_process = int(os.environ.get("RANK", "0")) == 0
    problems = training_problems(config.data)
    loaded = console.load_model(args.model, config.dtype, "cpu", args.prompt_format)
    bar = console.bar(total=0, desc="train", unit="step", disable=not main_process)

    def on_step(step) -> None:
        bar.total = step.total_steps
        bar.n = step.step
        shown = {k: f"{v:.3f}" for k, v in step.losses.items() if v or k in ("loss", "ce")}
        fields = [f"{k}={v}" for k, v in shown.items()] + [f"lr={step.lr:.1e}", console.token_rate(step.tokens, step.seconds)]
        bar.set_postfix_str(", ".join(fields))

    try:
        result = train(config, loaded, problems, args.out, resume=args.resume, overwrite=args.overwrite,
                       stop_after=args.stop_after, on_step=on_step, device=args.device,
                       pool=SandboxRunner(allow_unconfined=args.unsafe_unconfined))
    finally:
        bar.close()
    if main_process:
        if result.finished:
            print(f"trained {result.steps} steps on {result.examples} problems ({result.items_per_epoch} items per epoch)")
            print(f"model: {args.out} (quench generate/robustness --model {args.out})")
        else:
            print(f"stopped after step {result.steps} of {result.total_steps}; continue with --resume")
    return 0
