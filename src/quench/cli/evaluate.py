"""`quench evaluate samples.jsonl`: run every sample in the sandbox; write results and pass@k."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tqdm import tqdm

from quench.datasets import Problem
from quench.cli import common
from quench.errors import QuenchError
from quench.runs.evaluate import Summary, check_sample_tasks, execute_samples, summarize
from quench.runs.samples import read_samples


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("evaluate", help="execute samples.jsonl and report pass@k")
    parser.add_argument("samples", type=Path, help="samples.jsonl (human-eval format: task_id, completion)")
    common.add_benchmark_args(parser)
    common.add_execution_args(parser)
    parser.add_argument("--out", type=Path, default=None, help="directory for results (default: beside samples)")
    common.add_ray_args(parser)
    parser.set_defaults(handler=run)


def evaluate_into(samples: list[dict], problems: list[Problem], out: Path, args: argparse.Namespace, source: str) -> Summary:
    """Execute what is not yet in out/results.jsonl, write summary.json, return the summary."""
    by_id = {p.task_id: p for p in problems}
    check_sample_tasks(samples, by_id, source)
    ks = common.parse_ks(args.k)
    bar = tqdm(total=len(samples), desc="execute", unit="program", dynamic_ncols=True)
    with common.pool_from_args(args) as pool:
        if pool.isolation != "bwrap":
            tqdm.write(f"note: bubblewrap is unavailable; programs run with rlimits and a process group only ({pool.isolation})")
        try:
            results = execute_samples(samples, by_id, pool, out / "results.jsonl", on_result=lambda r: bar.update(1))
        finally:
            bar.close()
    summary = summarize(results, ks)
    (out / "summary.json").write_text(json.dumps(summary.to_json(), indent=2) + "\n")
    return summary


def print_summary(summary: Summary, out: Path) -> None:
    scores = "  ".join(f"pass@{k} {v:.4f}" for k, v in summary.pass_at_k.items())
    print(f"{summary.num_problems} problems, {summary.num_samples} samples: {scores}")
    print("outcomes: " + ", ".join(f"{k} {v}" for k, v in summary.outcomes.items()))
    print(f"results in {out / 'results.jsonl'}, summary in {out / 'summary.json'}")


def infer_benchmark(args: argparse.Namespace, samples: list[dict]) -> None:
    """Take benchmark and prompt kind from the run's config.json, else from the task ids."""
    config_path = args.samples.parent / "config.json"
    if config_path.is_file() and args.benchmark == "humaneval" and args.tasks is None:
        config = json.loads(config_path.read_text())
        args.benchmark, args.split = config.get("benchmark", args.benchmark), config.get("split", args.split)
        args.partial = args.partial or bool(config.get("partial"))
    elif args.benchmark == "humaneval" and str(samples[0]["task_id"]).startswith("MBPP/"):
        args.benchmark, args.split = "mbpp", "all"
    if args.benchmark == "mbpp" and args.split is None:
        args.split = "all"  # select by the samples' task ids, whatever their split


def run(args: argparse.Namespace) -> int:
    if not args.samples.is_file():
        raise QuenchError(f"{args.samples}: no such samples file")
    samples = read_samples(args.samples)
    if not samples:
        raise QuenchError(f"{args.samples}: holds no samples")
    infer_benchmark(args, samples)
    wanted = {s["task_id"] for s in samples}
    problems = [p for p in common.problems_from_args(args) if p.task_id in wanted] or common.problems_from_args(args)
    out = args.out or args.samples.parent
    out.mkdir(parents=True, exist_ok=True)
    common.lock_run_dir(out)
    print_summary(evaluate_into(samples, problems, out, args, str(args.samples)), out)
    return 0
