"""`quench compare RUN_A RUN_B`: is B better than A, with how much certainty? (paired, per metric and category)"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from quench.errors import QuenchError
from quench.stats.figures import rounded


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "compare", help="B − A per metric with 95%% intervals and McNemar's test, for two runs over the same problems",
        description="Compare two `quench run` or two `quench robustness` directories over the same problems "
                    "(and variants, and k): per metric and category, the paired difference B − A with a 95% "
                    "bootstrap interval, McNemar's exact test for greedy pass/fail, and a verdict.")
    parser.add_argument("run_a", type=Path, metavar="RUN_A", help="the baseline run directory")
    parser.add_argument("run_b", type=Path, metavar="RUN_B", help="the run compared with it")
    parser.add_argument("--out", type=Path, default=None,
                        help="write compare.md, compare.html, compare.json and compare.png here")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON instead of a table")
    parser.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (default 2000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap resamples (default 0)")
    parser.set_defaults(handler=run)


def check_out(out: Path | None) -> None:
    if out is None:
        return
    existing = next((p for p in (out, *out.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        raise QuenchError(f"--out {out}: {existing} is not a directory")


def run(args: argparse.Namespace) -> int:
    if args.resamples < 100:
        raise QuenchError(f"--resamples must be at least 100, got {args.resamples}")
    check_out(args.out)
    from quench.robustness.compare import compare_runs, comparison_json, load_run, table_cells, write_comparison
    from quench.stats.intervals import BootstrapConfig

    bootstrap = BootstrapConfig(resamples=args.resamples, seed=args.seed)
    run_a, run_b = load_run(args.run_a), load_run(args.run_b)
    rows = compare_runs(run_a, run_b, bootstrap)
    if args.out is not None:
        write_comparison(args.out, rows, args.run_a, args.run_b, bootstrap)
    if args.json:
        print(json.dumps(rounded(comparison_json(rows, args.run_a, args.run_b, bootstrap)), indent=2))
    else:
        print_rows([table_cells(row) for row in rows])
        if args.out is not None:
            print(f"report: {args.out / 'compare.html'} (also compare.md, compare.json, compare.png)")
    return 0


def print_rows(cells: list[list[str]]) -> None:
    header = ["group", "metric", "A %", "B %", "B − A (points, 95% interval)", "McNemar p", "verdict"]
    widths = [max(len(row[i]) for row in [header, *cells]) for i in range(len(header))]
    for row in [header, *cells]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
