"""`quench run`: generate then evaluate, in one resumable run directory."""

from __future__ import annotations

import argparse
import json

from quench.cli import builders, console, flags, settings, validate
from quench.cli.evaluate import evaluate_into, print_summary
from quench.cli.generate import add_output_args, default_out, generate_into, run_config, settings_before_load
from quench.errors import QuenchError
from quench.runs import rundir
from quench.stats.figures import rounded


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("run", help="generate and evaluate: pass@k of a model on a benchmark")
    flags.add_benchmark_args(parser)
    flags.add_model_args(parser, auto=True)
    flags.add_sampling_args(parser)
    flags.add_execution_args(parser)
    add_output_args(parser)
    flags.add_ray_args(parser)
    parser.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                        help="sample each prompt until SECONDS are spent; report Pass@First and Pass@All (BASS)")
    parser.set_defaults(handler=run)


def check_args(args: argparse.Namespace) -> None:
    """Every flag and path, before the model loads and before --out is touched."""
    validate.check_generation_args(args)
    validate.check_execution_args(args)
    if args.time_budget is None:
        args.k = validate.resolve_ks(args.k, args.samples)


def run(args: argparse.Namespace) -> int:
    check_args(args)
    if args.time_budget is not None:
        return run_with_budget(args)
    problems = settings.problems_from_args(args)
    out = args.out or default_out(args)
    validate.check_out_dir(out)
    samples = generate_into(args, problems, out)
    summary = evaluate_into(samples, problems, out, args, str(out / "samples.jsonl"))
    print_summary(summary, out)
    return 0


def run_with_budget(args: argparse.Namespace) -> int:
    """BASS's time-budget evaluation: as many samples per prompt as the budget allows."""
    from quench.models import encode_prompt
    from quench.runs.budget_run import generate_within_budget, pass_first_and_all
    from quench.runs.evaluate import read_results

    if args.ray:
        raise QuenchError("--time-budget does not run on Ray yet (it needs the engine's deadline); drop --ray")
    if args.time_budget <= 0:
        raise QuenchError(f"--time-budget must be positive, got {args.time_budget}")
    if args.temperature <= 0:
        raise QuenchError("--time-budget needs --temperature > 0: greedy decoding gives the same sample every time")
    if args.backend != "quench":
        raise QuenchError("--time-budget needs --backend quench (the engine keeps the batch busy with new samples)")
    if args.stop_rule == flags.AUTO_STOP_RULE:
        args.stop_rule = "none"  # sampling within a budget: no rule stops a sample
    if args.stop_rule != "none":
        raise QuenchError(f"--stop-rule {args.stop_rule} does not apply with --time-budget yet; use --guard or drop it")
    problems = settings.problems_from_args(args)
    out = args.out or default_out(args).with_name(default_out(args).name + f"-budget{args.time_budget:g}")
    validate.check_out_dir(out)
    sampling = settings.sampling_from_args(args)
    rundir.check_run_dir(out, {**settings_before_load(args, problems), "time_budget": args.time_budget}, args.overwrite)
    loaded = console.load_model(args.model, args.dtype, args.device, args.prompt_format, args.weights)
    stops = settings.stops_from_args(args, loaded.prompt_format)
    recorded = {**run_config(args, problems, loaded, stops), "time_budget": args.time_budget}
    backend = builders.backend_from_args(args, loaded, len(problems))  # a missing draft or guard fails before --out is written
    rundir.prepare_run_dir(out, recorded, args.overwrite)
    bar = console.bar(total=len(problems), desc="budget", unit="problem")
    try:
        samples = generate_within_budget(problems, backend, lambda text: encode_prompt(loaded, text), sampling, stops,
                                         loaded.prompt_format, args.time_budget, out / "samples.jsonl",
                                         on_problem=lambda batch: bar.update(1))
    finally:
        bar.close()
    args.k = "1"
    summary = evaluate_into(samples, problems, out, args, str(out / "samples.jsonl"))
    results = read_results(out / "results.jsonl")
    rates = pass_first_and_all(samples, results)
    (out / "summary.json").write_text(json.dumps(rounded({**summary.to_json(), **rates}), indent=2) + "\n")
    print(f"{len(problems)} problems, {args.time_budget:g} s each: Pass@First {console.percent(rates['pass@first'])}, "
          f"Pass@All {console.percent(rates['pass@all'])}, {rates['mean_samples']:.1f} samples per problem")
    return 0
