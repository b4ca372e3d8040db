"""CodeFort's robust-training claim, measured with intervals: each strategy vs plain fine-tuning on MBPP test.

    OMP_NUM_THREADS=1 python benchmarks/codefort.py --root runs/codefort --engines 2 \\
        --keep docs/results/codefort                                                  # the full experiment
    OMP_NUM_THREADS=1 python benchmarks/codefort.py --root runs/codefort-smoke --tasks 11-14 \\
        --strategies none,alp --limit 8 --transforms VarRenamerNaive,FuncRenameCamelCase   # minutes

Every model is trained on MBPP `train` with the same data, steps and seed (LoRA on the top
`--lora-layers` blocks; `quench train`), then evaluated greedily with `quench robustness` on MBPP test
problems 11-510 (never trained on) for the categories the strategies train on. Rows: the base model,
then one per strategy; columns: nominal Pass@1 and RP@1, RD@1, RR@1 per category, each with its 95%
bootstrap interval; then `quench compare` of each strategy against plain fine-tuning (`none`).

Evaluation is greedy in float32 with the batch-invariant kernels and the function-complete rule
(`--stop-rule function`): an answer is the same at any batch size and engine count, so models
evaluated on different days, alone or side by side, compare answer for answer; drafting two tokens
by prompt lookup (`--speculate ngram`) only makes them faster.

70-100 minutes of two cores per model (`--engines 2`). Every step resumes: a training run
continues from its saved state (`--resume`), a robustness run from its run directory, and finished
steps are recorded in ROOT/steps.json, so the script can be killed and started again with the same
arguments. Models go one at a time (trained, then evaluated); `--keep docs/results/codefort` copies
each finished evaluation's summaries there, and a model whose summaries are there is not trained or
evaluated again, so the experiment carries on from any ROOT. Several instances may share a ROOT,
each with its own `--eval-only` models. `--report-only --root docs/results/codefort` prints the
tables.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from quench.robustness.compare import compare_runs, load_run, table_cells
from quench.robustness.report import load_metrics
from quench.robustness.tables import with_interval

STRATEGIES = ("none", "da", "mda", "ba", "alp", "cl-seq")  # plain, DA, masked DA, batch aug., ALP, contrastive
NAMES = {"base": "base model", "none": "plain fine-tuning", "da": "data augmentation", "mda": "masked DA",
         "ba": "batch augmentation", "alp": "ALP", "cl-seq": "contrastive (sequence)"}
# What `--report-only` and `quench compare` read from an evaluation, and what says how it ran.
SUMMARY_FILES = ("metrics.json", "outcomes.json", "config.json", "elapsed.json")


def quench(*args: str) -> list[str]:
    return [sys.executable, "-m", "quench.cli.main", *args]


def train_command(args: argparse.Namespace, strategy: str, out: Path) -> list[str]:
    # a saved state resumes; a directory left by a run that failed before saving one starts over
    resume = ["--resume"] if (out / "state").exists() else ["--overwrite"] if out.exists() else []
    return quench("train", "--model", args.model, "--prompt-format", args.prompt_format, "--strategy", strategy,
                  "--categories", args.categories, "--splits", "train", "--seed", str(args.seed),
                  "--epochs", str(args.epochs), "--dtype", "bfloat16", "--lora-layers", str(args.lora_layers),
                  "--lr", "5e-4", "--batch-size", "4", "--max-length", str(args.max_length), "--out", str(out), *resume,
                  *(["--limit", str(args.limit)] if args.limit else []),
                  *(["--transforms", args.transforms] if args.transforms else []))


def evaluate_command(args: argparse.Namespace, model: str, out: Path) -> list[str]:
    # float32 batch-invariant kernels: every answer is the same at any batch size, engine count or
    # speculation, so evaluations run on different days or with different --engines compare answer
    # for answer; prompt lookup (2 drafted tokens) only makes them faster
    return quench("--threads", str(args.engines), "robustness", "--model", model, "--prompt-format", args.prompt_format,
                  "--dtype", "float32", "--batch-invariant", "--batch-size", "32", "--engines", str(args.engines),
                  "--speculate", "ngram", "--draft-length", "fixed", "--draft-tokens", "2", "--draft-max-rows", "0",
                  "--stop-rule", "function", "--benchmark", "mbpp", "--tasks", args.tasks,
                  "--categories", args.categories, "--seeds", str(args.seeds), "--max-new-tokens", "320",
                  "--out", str(out), *(["--transforms", args.transforms] if args.transforms else []))


def run_step(root: Path, name: str, command: list[str]) -> None:
    """Run one step unless ROOT/steps.json says it finished; record its wall time."""
    steps_file = root / "steps.json"
    if name in read_steps(steps_file):
        return
    print(f"[{name}] {' '.join(command[2:])}", flush=True)
    started = time.perf_counter()
    done = subprocess.run(command)
    if done.returncode != 0:
        sys.exit(f"error: step {name} failed (exit code {done.returncode}); fix it and run the script again")
    steps = read_steps(steps_file)  # read again: another instance may have finished a step meanwhile
    steps[name] = {"command": " ".join(command[2:]), "seconds": round(time.perf_counter() - started, 1)}
    steps_file.write_text(json.dumps(steps, indent=2) + "\n")


def read_steps(steps_file: Path) -> dict:
    return json.loads(steps_file.read_text()) if steps_file.exists() else {}


def keep_summaries(root: Path, keep: Path, name: str) -> None:
    """Copy model `name`'s finished evaluation summaries (no samples, no weights) to `keep`; merge the steps."""
    run, kept_run = root / f"eval-{name}", keep / f"eval-{name}"
    kept_run.mkdir(parents=True, exist_ok=True)
    for file in SUMMARY_FILES:
        if (run / file).is_file():
            (kept_run / file).write_text(rooted(root, (run / file).read_text()))
    steps = read_steps(keep / "steps.json") | json.loads(rooted(root, json.dumps(read_steps(root / "steps.json"))))
    (keep / "steps.json").write_text(json.dumps(steps, indent=2) + "\n")


def rooted(root: Path, text: str) -> str:
    """`text` with this machine's ROOT path written as ROOT (models and run directories live there)."""
    return text.replace(str(root.resolve()), "ROOT").replace(str(root), "ROOT")


def kept(keep: Path | None, name: str) -> bool:
    """Whether `keep` already holds the finished evaluation of model `name`."""
    return keep is not None and (keep / f"eval-{name}" / "metrics.json").is_file()


def print_table(rows: dict[str, Path]) -> None:
    """Strategy rows × nominal Pass@1 and per-category RP, RD, RR, in percent with 95% intervals."""
    loaded = {name: load_metrics(path / "metrics.json")[0] for name, path in rows.items()}
    if not loaded:
        return
    categories = [g.category for g in next(iter(loaded.values())).categories]
    header = ["model", "Pass@1 full"] + [f"{c} {m}@1" for c in categories for m in ("RP", "RD", "RR")]
    print("| " + " | ".join(header) + " |")
    print("|---" + "|---:" * (len(header) - 1) + "|")
    for name, metrics in loaded.items():
        cells = [NAMES.get(name, name), with_interval(metrics.nominal_pass["full"][1],
                                                       metrics.nominal_intervals.get("full", {}).get(1))]
        for group in metrics.categories:
            cells += [with_interval(getattr(group, m)[1], group.interval(m, 1))
                      for m in ("robust_pass", "robust_drop", "robust_relative")]
        print("| " + " | ".join(cells) + " |")


def print_comparisons(rows: dict[str, Path]) -> None:
    if "none" not in rows:
        return
    plain = load_run(rows["none"])
    for name, path in rows.items():
        if name in ("none", "base"):
            continue
        print(f"\n{NAMES.get(name, name)} (B) vs plain fine-tuning (A):")
        for row in compare_runs(plain, load_run(path)):
            print("  " + "  ".join(table_cells(row)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("runs/codefort"))
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--prompt-format", default="chat")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--categories", default="code_syntax,function_name")
    parser.add_argument("--transforms", default=None, help="a subset of the categories' transformations")
    parser.add_argument("--tasks", default="11-510", help="MBPP test problems to evaluate on")
    parser.add_argument("--seeds", type=int, default=1, help="s: variants per randomised transformation")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--limit", type=int, default=None, help="train on the first N MBPP train problems")
    parser.add_argument("--lora-layers", type=int, default=4)
    parser.add_argument("--max-length", type=int, default=320, help="longer training sequences are left out")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--engines", type=int, default=1, help="evaluation engines, one thread each")
    parser.add_argument("--keep", type=Path, default=None,
                        help="copy finished evaluations' summaries here (e.g. docs/results/codefort)")
    parser.add_argument("--eval-only", default=None,
                        help="comma-separated models to evaluate (base and/or strategies), nothing else")
    parser.add_argument("--report-only", action="store_true", help="print the tables from finished runs")
    parser.add_argument("--train-only", action="store_true", help="train the models, evaluate none")
    args = parser.parse_args()
    args.root.mkdir(parents=True, exist_ok=True)
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    rows = {"base": args.root / "eval-base"}
    rows.update({s: args.root / f"eval-{s}" for s in strategies})
    evaluated = list(rows) if args.eval_only is None else [s.strip() for s in args.eval_only.split(",") if s.strip()]
    unknown = sorted(set(evaluated) - set(rows))
    if unknown:
        parser.error(f"--eval-only: {', '.join(unknown)} not among base and --strategies")
    if args.engines < 1:
        parser.error(f"--engines must be at least 1, got {args.engines}")
    # model by model: train it (minutes), evaluate it (hours); models --keep holds are done
    for name in [] if args.report_only else [n for n in evaluated if not kept(args.keep, n)]:
        if name != "base":
            run_step(args.root, f"train-{name}", train_command(args, name, args.root / f"train-{name}"))
        if not args.train_only:
            model = args.model if name == "base" else str(args.root / f"train-{name}")
            run_step(args.root, f"eval-{name}", evaluate_command(args, model, rows[name]))
            if args.keep:
                keep_summaries(args.root, args.keep, name)
    rows = {name: args.keep / path.name if kept(args.keep, name) else path for name, path in rows.items()}
    print_table({name: path for name, path in rows.items() if (path / "metrics.json").is_file()})
    print_comparisons({name: path for name, path in rows.items() if (path / "outcomes.json").is_file()})


if __name__ == "__main__":
    main()
