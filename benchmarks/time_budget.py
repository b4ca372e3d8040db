"""BASS's time-budget claim with intervals: Pass@First and Pass@All of regular vs hybrid speculative sampling.

    python benchmarks/time_budget.py --root runs/time-budget                     # all 164, 1/2/5/10 s
    python benchmarks/time_budget.py --root runs/tb-smoke --limit 8 --budgets 1,2   # minutes
    python benchmarks/time_budget.py --root runs/time-budget-b1 --batch-size 1 --budgets 5,10,20

For each decoding, `quench run --time-budget B --temperature 0.8` on HumanEval at the largest budget
B, with regular decoding (`--speculate none`) and with hybrid speculation (`--speculate hybrid`),
the two runs side by side (one thread each, started together, so both see the same machine): the
engine keeps sampling each prompt until its budget is spent. A smaller budget b is read from the
same run: the samples that finished within b seconds of the prompt's start, which is what a run
at budget b does (a budget only ends sampling; it changes nothing before it).
Pass@First: the first sample to finish passes; Pass@All: any finished sample passes (BASS, §5).
Each with a 95% bootstrap interval over problems, samples finished per prompt, and hybrid −
regular as a paired difference over the same problems.

Every run directory resumes (`quench run` keeps samples and results), and a finished run is not
started again: kill the script and start it with the same arguments to continue.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from quench.robustness.compare import difference_cell
from quench.robustness.tables import with_interval
from quench.stats.intervals import BootstrapConfig, mean_intervals, paired_difference
from quench.runs.budget_run import pass_first_and_all

MODES = {"regular": "none", "hybrid": "hybrid"}


def run_dir(root: Path, mode: str, budget: float) -> Path:
    return root / f"{mode}-{budget:g}s"


def run_command(args: argparse.Namespace, mode: str, budget: float) -> list[str]:
    return [sys.executable, "-m", "quench.cli.main", "run", "--model", args.model, "--benchmark", "humaneval",
            "--limit", str(args.limit), "--temperature", "0.8", "--seed", str(args.seed),
            "--time-budget", f"{budget:g}", "--speculate", MODES[mode], "--batch-size", str(args.batch_size),
            "--out", str(run_dir(args.root, mode, budget))]


def ensure_runs(args: argparse.Namespace, budget: float) -> None:
    """Both decodings at `budget`, side by side on one thread each; finished runs are kept."""
    started = time.perf_counter()
    running = {}
    for mode in MODES:
        out = run_dir(args.root, mode, budget)
        if (out / "summary.json").is_file():
            continue
        command = run_command(args, mode, budget)
        print(f"[{mode} {budget:g} s] {' '.join(command[3:])}", flush=True)
        running[mode] = subprocess.Popen(command, env={**os.environ, "OMP_NUM_THREADS": "1"})
    for mode, process in running.items():
        out = run_dir(args.root, mode, budget)
        if process.wait() != 0:
            sys.exit(f"error: {out} failed (exit code {process.returncode}); fix it and run the script again")
        (out / "wall.json").write_text(json.dumps({"seconds": round(time.perf_counter() - started, 1)}) + "\n")


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def within(rows: list[dict], budget: float) -> list[dict]:
    """The samples a run at `budget` seconds would have kept; a prompt with none keeps one miss."""
    kept = [r for r in rows if r.get("finish_s") is not None and r["finish_s"] <= budget]
    return kept or [{**rows[0], "finish_s": None}]


def per_problem(out: Path, budget: float) -> dict[str, tuple[float, float, int]]:
    """task → (passes first, passes any, samples finished within `budget`), from the run's files."""
    samples, results = read_jsonl(out / "samples.jsonl"), read_jsonl(out / "results.jsonl")
    by_task: dict[str, list[dict]] = defaultdict(list)
    for sample in samples:
        by_task[sample["task_id"]].append(sample)
    values = {}
    for task, rows in by_task.items():
        kept = within(rows, budget)
        rates = pass_first_and_all(kept, results)
        values[task] = (rates["pass@first"], rates["pass@all"], sum(r.get("finish_s") is not None for r in kept))
    return values


def print_tables(args: argparse.Namespace, budgets: list[float]) -> None:
    bootstrap = BootstrapConfig()
    largest = max(budgets)
    print("| budget | decoding | Pass@First | Pass@All | samples finished per prompt |")
    print("|---:|---|---:|---:|---:|")
    differences = []
    for budget in budgets:
        values = {mode: per_problem(run_dir(args.root, mode, largest), budget) for mode in MODES
                  if (run_dir(args.root, mode, largest) / "summary.json").is_file()}
        for mode, by_task in values.items():
            array = np.array([by_task[t] for t in sorted(by_task)], dtype=float)  # (problems, 3)
            first, every = mean_intervals(array[:, :2], bootstrap)
            print(f"| {budget:g} s | {mode} | {with_interval(first.point, first)} | "
                  f"{with_interval(every.point, every)} | {array[:, 2].mean():.1f} |")
        if len(values) == 2 and values["regular"].keys() == values["hybrid"].keys():
            tasks = sorted(values["regular"])
            a = np.array([values["regular"][t] for t in tasks], dtype=float)
            b = np.array([values["hybrid"][t] for t in tasks], dtype=float)
            differences.append((budget, paired_difference(a[:, 0], b[:, 0], bootstrap),
                                paired_difference(a[:, 1], b[:, 1], bootstrap)))
    if differences:
        print("\n| budget | hybrid − regular: Pass@First (points) | Pass@All (points) |")
        print("|---:|---:|---:|")
        for budget, first, every in differences:
            print(f"| {budget:g} s | {difference_cell(first)} | {difference_cell(every)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("runs/time-budget"))
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--budgets", default="1,2,5,10", help="seconds per prompt, comma-separated")
    parser.add_argument("--limit", type=int, default=164, help="the first N HumanEval problems")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=8, help="slots sampling each prompt at once")
    parser.add_argument("--report-only", action="store_true", help="print the tables from finished runs")
    args = parser.parse_args()
    budgets = sorted(float(b) for b in args.budgets.split(",") if b.strip())
    if not budgets or budgets[0] <= 0:
        sys.exit(f"error: --budgets {args.budgets!r}: give positive seconds, comma-separated")
    if not args.report_only:
        args.root.mkdir(parents=True, exist_ok=True)
        ensure_runs(args, budgets[-1])
    print_tables(args, budgets)


if __name__ == "__main__":
    main()
