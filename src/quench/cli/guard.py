"""`quench guard build-data | train | info`: GenGuard's training data, training, and a look at a guard file."""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

from quench.datasets import Problem, load_benchmark
from quench.cli import builders, console, flags, settings, validate
from quench.errors import QuenchError
from quench.runs import rundir
from quench.stopping.policy import GuardPolicy

TRAIN_SPLITS = ("train", "validation")  # MBPP's; never "test", never HumanEval
GUARD_BENCHMARKS = ("mbpp", "mbjsp", "mbgp", "mbcpp", "mbjp")  # MBPP and MBXP share MBPP's splits by task number


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("guard", help="GenGuard early stopping: build training data, train, inspect")
    verbs = parser.add_subparsers(dest="guard_command", required=True)

    build = verbs.add_parser(
        "build-data", help="generate on MBPP/MBXP train/validation prompts, label tokens, save hidden states"
    )
    build.add_argument("--out", type=Path, required=True, help="dataset directory (resumes an unfinished build)")
    build.add_argument("--benchmark", default="mbpp",
                       help=f"comma-separated, from {', '.join(GUARD_BENCHMARKS)} (one dataset, each answer keeps its language)")
    build.add_argument("--splits", default="train,validation", help="MBPP splits (train, validation)")
    build.add_argument("--limit", default=None,
                       help="first N problems of each split and benchmark: N, or per split, e.g. train:48,validation:16")
    build.add_argument("--max-new-tokens", type=int, default=300, help="tokens generated per answer, at most")
    flags.add_model_args(build, backends=("hf", "quench"))  # labels need the model's hidden states here
    build.set_defaults(handler=run_build)

    train = verbs.add_parser("train", help="train a guard on a dataset from build-data")
    train.add_argument("--data", type=Path, required=True, help="dataset directory")
    train.add_argument("--out", type=Path, required=True, help="guard file to write (.safetensors)")
    train.add_argument("--kind", default="linear", choices=["linear", "mlp"], help="the guard's classifier")
    train.add_argument("--mlp-hidden", type=int, default=64, help="hidden units of --kind mlp")
    train.add_argument("--epochs", type=int, default=30, help="passes over the training answers")
    train.add_argument("--lr", type=float, default=3e-3, help="learning rate")
    train.add_argument("--val-fraction", type=float, default=0.2,
                       help="held-out answers if the data has no validation split")
    train.add_argument("--seed", type=int, default=0, help="seed of the split and the initial weights")
    train.add_argument("--benchmark", default=None,
                       help="train on these benchmarks' answers only (comma-separated, e.g. mbpp); default all")
    add_policy_args(train)
    train.set_defaults(handler=run_train)

    score = verbs.add_parser("eval", help="a guard's token precision/recall per language on a dataset's validation answers")
    score.add_argument("path", type=Path, help="guard file (.safetensors), or auto for the model's shipped guard")
    score.add_argument("--data", type=Path, required=True, help="dataset directory")
    score.add_argument("--answers", default="validation", choices=["validation", "all"],
                       help="score the dataset's validation answers, or all of them")
    score.add_argument("--threshold", type=float, default=None, help="override the guard's threshold")
    score.set_defaults(handler=run_eval)

    info = verbs.add_parser("info", help="print what a guard file was trained for and its validation figures")
    info.add_argument("path", type=Path)
    info.set_defaults(handler=run_info)


def add_policy_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policy", default="lines", choices=["lines", "consecutive"],
                        help="line voting or N stop votes in a row")
    parser.add_argument("--consecutive", type=int, default=3, help="N for --policy consecutive")
    parser.add_argument("--max-empty-lines", type=int, default=3, help="stop after more empty lines in a row (0 = off)")
    parser.add_argument("--threshold", default="auto",
                        help="stop probability at which a token votes stop; auto = chosen on validation")


def policy_from_args(args: argparse.Namespace) -> GuardPolicy:
    try:
        threshold = 0.5 if args.threshold == "auto" else float(args.threshold)
        return GuardPolicy(args.policy, args.consecutive, args.max_empty_lines, threshold)
    except ValueError as err:
        raise QuenchError(f"--threshold/--consecutive/--max-empty-lines: {err}") from None


def parse_benchmarks(spec: str) -> list[str]:
    """`"mbpp,mbjsp"` → ["mbpp", "mbjsp"]; HumanEval and unknown names are refused."""
    return parse_choices(spec, "--benchmark", GUARD_BENCHMARKS, "HumanEval must stay unseen")


def parse_splits(spec: str) -> list[str]:
    return parse_choices(spec, "--splits", TRAIN_SPLITS, "test data must stay unseen")


def parse_choices(spec: str, flag: str, allowed: tuple[str, ...], why: str) -> list[str]:
    """A comma-separated list of names from `allowed`, in order, each once; anything else is refused."""
    names = list(dict.fromkeys(name.strip() for name in spec.split(",") if name.strip()))
    if not names or any(name not in allowed for name in names):
        raise QuenchError(f"{flag}: choose from {', '.join(allowed)} ({why}), got {spec!r}")
    return names


def parse_limits(spec: str | None, splits: list[str]) -> dict[str, int | None]:
    """`--limit`: `N` for every split, or `train:48,validation:16` (a split not named is not limited)."""
    if spec is None:
        return {s: None for s in splits}
    limits: dict[str, int | None] = {s: None for s in splits}
    try:
        if ":" not in spec:
            limits = {s: int(spec) for s in splits}
        else:
            for part in (p.strip() for p in spec.split(",") if p.strip()):
                split, number = part.split(":")
                if split.strip() not in splits:
                    raise ValueError(f"split {split.strip()!r} is not in --splits")
                limits[split.strip()] = int(number)
    except ValueError as err:
        raise QuenchError(f"--limit: N or split:N,... (e.g. train:48,validation:16), got {spec!r} ({err})") from None
    for number in limits.values():
        validate.check_limit(number)
    return limits


def build_problems(benchmarks: list[str], splits: list[str], limits: dict[str, int | None]) -> list[tuple[str, Problem]]:
    """(split, problem) pairs, round-robin over the benchmarks and splits, so a partial build holds every language."""
    lists = [[(split, p) for p in load_benchmark(b, split)[: limits[split]]] for split in splits for b in benchmarks]
    return [pair for k in range(max(map(len, lists), default=0)) for pair in (lst[k] for lst in lists if k < len(lst))]


def run_build(args: argparse.Namespace) -> int:
    benchmarks = parse_benchmarks(args.benchmark)
    splits = parse_splits(args.splits)
    if args.max_new_tokens < 1:
        raise QuenchError(f"--max-new-tokens must be at least 1, got {args.max_new_tokens}")
    limits = parse_limits(args.limit, splits)
    if args.guard:
        raise QuenchError("--guard: build-data labels answers generated without early stopping; drop --guard")
    validate.check_model_args(args)
    settings.backend_options_from_args(args)
    validate.check_out_dir(args.out)
    problems = build_problems(benchmarks, splits, limits)
    from quench.models import encode_prompt
    from quench.stopping.dataset import ANSWERS, generate_answers, label_answers, read_answers

    loaded = console.load_model(args.model, args.dtype, args.device, args.prompt_format, args.weights)
    backend = builders.backend_from_args(args, loaded)
    args.out.mkdir(parents=True, exist_ok=True)
    rundir.lock_run_dir(args.out)
    encode = lambda text: encode_prompt(loaded, text)  # noqa: E731
    wanted = {p.task_id for _, p in problems}
    already = sum(r["task_id"] in wanted for r in read_answers(args.out / ANSWERS))
    bar = console.bar(total=len(problems), initial=already, desc="generate", unit="answer")
    started = time.perf_counter()
    answers = generate_answers(problems, backend, encode, args.max_new_tokens, args.out / ANSWERS, lambda _: bar.update(1))
    bar.close()
    print(f"{len(answers)} answers in {time.perf_counter() - started:.0f}s; labelling and collecting hidden states")
    meta = {
        "model": args.model, "prompt_format": loaded.prompt_format, "dtype": str(loaded.dtype).removeprefix("torch."),
        "max_new_tokens": args.max_new_tokens, "benchmarks": benchmarks,
        "description": f"{'+'.join(benchmarks)} {'+'.join(splits)} (limit {args.limit or 'none'})",
    }
    data = label_answers(answers, {p.task_id: p for _, p in problems}, loaded.tokenizer, loaded.model, encode,
                         loaded.prompt_format, meta)
    data.save(args.out)
    stop = float(data.labels.float().mean())
    print(f"{len(data.records)} answers labelled ({data.meta['skipped']} skipped), {len(data.labels)} tokens, "
          f"{stop:.0%} 'stop', hidden size {data.hidden_size} -> {args.out}")
    return 0


def run_train(args: argparse.Namespace) -> int:
    validate.check_input_dir(args.data, "--data")
    validate.check_out_file(args.out)
    policy = policy_from_args(args)
    wanted = parse_benchmarks(args.benchmark) if args.benchmark is not None else None
    from quench.stopping.dataset import GuardDataset
    from quench.stopping.train import TrainConfig, evaluate_by_language, split_answers, train_guard

    data = GuardDataset.load(args.data)
    if wanted is not None:
        data = select_benchmarks(data, wanted)
    config = TrainConfig(args.kind, args.mlp_hidden, args.epochs, lr=args.lr, val_fraction=args.val_fraction,
                         seed=args.seed)
    guard, metrics = train_guard(data, config, policy, calibrate=args.threshold == "auto")
    guard.save(args.out)
    print(f"threshold {guard.policy.threshold:g}; validation: {metrics.tokens} tokens ({metrics.stop_share:.0%} stop): "
          f"precision {metrics.precision:.3f}, recall {metrics.recall:.3f}, accuracy {metrics.accuracy:.3f}")
    print(f"policy on {metrics.answers} answers: {metrics.stopped} stopped after the code, {metrics.early} too early, "
          f"{metrics.never} never; {metrics.generated_share:.0%} of the tokens generated, "
          f"{metrics.excess_kept:.1f} excess tokens kept per stop")
    print_by_language(evaluate_by_language(guard, data, split_answers(data, args.val_fraction, args.seed)))
    print(f"guard ({args.out.stat().st_size} bytes) -> {args.out}")
    return 0


def select_benchmarks(data, wanted: list[str]):  # GuardDataset -> GuardDataset (imported late: torch)
    """The answers of the `wanted` benchmarks (answers built before MBXP carry none: MBPP)."""
    have = [r.get("benchmark", "mbpp") for r in data.records]
    missing = [b for b in wanted if b not in have]
    if missing:
        raise QuenchError(f"--benchmark: the dataset has no {', '.join(missing)} answers (it has {', '.join(sorted(set(have)))})")
    return data.select([b in wanted for b in have])


def print_by_language(by_language: dict) -> None:
    """One line per language: validation token precision/recall and the policy's outcome."""
    if len(by_language) < 2 and not any(language != "python" for language in by_language):
        return
    print(f"{'language':<11} {'answers':>7} {'tokens':>7} {'stop':>5} {'precision':>9} {'recall':>6} "
          f"{'early':>5} {'never':>5} {'generated':>9}")
    for language, m in by_language.items():
        print(f"{language:<11} {m.answers:>7} {m.tokens:>7} {m.stop_share:>5.0%} {m.precision:>9.3f} {m.recall:>6.3f} "
              f"{m.early:>5} {m.never:>5} {m.generated_share:>9.0%}")


def run_eval(args: argparse.Namespace) -> int:
    validate.check_input_dir(args.data, "--data")
    if str(args.path) != "auto":
        validate.check_input_file(args.path, "guard file")
    if args.threshold is not None and not 0.0 < args.threshold < 1.0:
        raise QuenchError(f"--threshold must be between 0 and 1, got {args.threshold}")
    import torch

    from quench.stopping.dataset import GuardDataset
    from quench.stopping.loading import load_guard
    from quench.stopping.train import evaluate_by_language, evaluate_guard, split_answers

    data = GuardDataset.load(args.data)
    guard = load_guard(args.path, DataModel(data.meta.get("model", ""), data.hidden_size))
    if args.threshold is not None:
        guard = guard.with_policy(threshold=args.threshold)
    answers = split_answers(data, 0.2, 0) if args.answers == "validation" else torch.ones(len(data.records), dtype=torch.bool)
    print(f"{args.path} (threshold {guard.policy.threshold:g}) on {args.data}, {args.answers} answers:")
    print_by_language(evaluate_by_language(guard, data, answers) | {"all": evaluate_guard(guard, data, answers)})
    return 0


@dataclass(frozen=True)
class DataModel:
    """What `load_guard` needs to know of the model a dataset was built with."""

    name: str
    hidden_size: int

    @property
    def config(self) -> "DataModel":
        return self


def run_info(args: argparse.Namespace) -> int:
    validate.check_input_file(args.path, "guard file")
    from quench.stopping.loading import read_guard

    guard = read_guard(args.path)
    print(json.dumps({"info": guard.info.__dict__, "policy": guard.policy.__dict__}, indent=2, default=str))
    return 0
