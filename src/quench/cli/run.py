"""`quench run`: generate then evaluate, in one resumable run directory."""

from __future__ import annotations

import argparse

from quench.cli import common
from quench.cli.evaluate import evaluate_into, print_summary
from quench.cli.generate import add_output_args, default_out, generate_into


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("run", help="generate and evaluate: pass@k of a model on a benchmark")
    common.add_benchmark_args(parser)
    common.add_model_args(parser)
    common.add_sampling_args(parser)
    common.add_execution_args(parser)
    add_output_args(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    problems = common.problems_from_args(args)
    out = args.out or default_out(args)
    samples = generate_into(args, problems, out)
    summary = evaluate_into(samples, problems, out, args, str(out / "samples.jsonl"))
    print_summary(summary, out)
    return 0
