"""What batch size, prompt-lookup speculation and the stop rules buy `quench robustness --batch-invariant`, and a
check of what they change.

    python benchmarks/robustness_levers.py --setups b32,b64-ngram2     # the table in docs/benchmarks.md
    python benchmarks/robustness_levers.py                               # every setup against b32

Each setup is a `quench robustness` run of the same problems (all four categories, greedy, bfloat16, one engine
with one thread). Every setup after the first runs side by side with a run of the first (one per core), so each
ratio compares two runs that shared the machine; the table prints each setup's wall time, its ratio against the
first setup's run beside it, how many of its completions equal the first setup's, prompt by prompt (batch
invariance: all of them, where no stop rule differs), and how many units (problem and variant) pass or fail as
they do there (a stop rule cuts answers: the outcomes say whether that changed any verdict).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from quench.robustness.report import OUTCOMES_FILE, load_outcomes

NGRAM = ["--speculate", "ngram", "--draft-max-rows", "0", "--draft-loop-tokens", "0"]  # loop drafts: the -loopN setups
SETUPS: dict[str, list[str]] = {
    "b32": ["--batch-size", "32"],
    "b64": ["--batch-size", "64"],
    "b32-ngram": ["--batch-size", "32", *NGRAM],  # BASS's dynamic draft length, from 7 tokens
    "b32-ngram3": ["--batch-size", "32", *NGRAM, "--draft-length", "fixed", "--draft-tokens", "3"],
    "b64-ngram2": ["--batch-size", "64", *NGRAM, "--draft-length", "fixed", "--draft-tokens", "2"],
    "b64-ngram3": ["--batch-size", "64", *NGRAM, "--draft-length", "fixed", "--draft-tokens", "3"],
    "b128-ngram2": ["--batch-size", "128", *NGRAM, "--draft-length", "fixed", "--draft-tokens", "2"],
    "b4-ngram2": ["--batch-size", "4", *NGRAM, "--draft-length", "fixed", "--draft-tokens", "2"],
    # ... and rows in a repetition loop draft 8 or 15 tokens of it
    "b4-ngram2-loop8": ["--batch-size", "4", *NGRAM, "--draft-length", "fixed", "--draft-tokens", "2",
                        "--draft-loop-tokens", "8"],
    "b64-ngram2-loop8": ["--batch-size", "64", *NGRAM, "--draft-length", "fixed", "--draft-tokens", "2",
                         "--draft-loop-tokens", "8"],
    "b64-ngram2-loop15": ["--batch-size", "64", *NGRAM, "--draft-length", "fixed", "--draft-tokens", "2",
                          "--draft-loop-tokens", "15"],
    # ... and an answer ends once its function is complete, or once it only repeats itself (these change answers:
    # compare their outcomes)
    "b64-ngram2-loop8-function": ["--batch-size", "64", *NGRAM, "--draft-length", "fixed", "--draft-tokens", "2",
                                  "--draft-loop-tokens", "8", "--stop-rule", "function"],
    "b64-ngram2-loop8-stoploop": ["--batch-size", "64", *NGRAM, "--draft-length", "fixed", "--draft-tokens", "2",
                                  "--draft-loop-tokens", "8", "--stop-rule", "loop"],
}


def log_path(out: Path) -> Path:
    """Where a run's console output goes: its progress bars would fill a pipe nobody reads and stall it."""
    return out.parent / f"{out.name}.log"


def start(out: Path, common: list[str], extra: list[str]) -> subprocess.Popen:
    command = [sys.executable, "-m", "quench.cli.main", "--threads", "1", "robustness", *common, *extra, "--out", str(out)]
    with log_path(out).open("w") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(command, stdout=log, stderr=log, env={**os.environ, "OMP_NUM_THREADS": "1"})


def run_side_by_side(runs: list[tuple[Path, list[str]]], common: list[str]) -> list[float]:
    """Start every run at once; each one's wall seconds, to its own end."""
    began = time.perf_counter()
    processes = [start(out, common, extra) for out, extra in runs]
    walls: dict[int, float] = {}
    while len(walls) < len(processes):
        for index, process in enumerate(processes):
            if index not in walls and process.poll() is not None:
                walls[index] = time.perf_counter() - began
        time.sleep(0.2)
    for (out, _), process in zip(runs, processes):
        if process.returncode != 0:
            raise SystemExit(f"{out.name} failed:\n{log_path(out).read_text()[-3000:]}")
    return [walls[index] for index in range(len(processes))]


def completions(out: Path) -> dict[str, str]:
    """prompt id -> the raw completion."""
    rows = (json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines() if line.strip())
    return {row["prompt_id"]: row["raw"] for row in rows}


def unit_outcomes(out: Path) -> dict[tuple[str, int, str], tuple[bool, ...]]:
    """(transformation or nominal baseline, seed, task id) -> the unit's pass/fail per sample."""
    run = load_outcomes(out / OUTCOMES_FILE)
    units = {("nominal_full", 0, task): passed for task, passed in run.nominal_full.items()}
    units |= {("nominal_partial", 0, task): passed for task, passed in run.nominal_partial.items()}
    return units | {(v.transformation, v.seed, task): passed for v in run.variants for task, passed in v.outcomes.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=10, help="the first N HumanEval problems")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--setups", default="b32,b64,b32-ngram,b32-ngram3,b64-ngram2",
                        help=f"comma-separated, the first is the reference; from {', '.join(SETUPS)}")
    args = parser.parse_args()
    names = [name.strip() for name in args.setups.split(",") if name.strip()]
    if unknown := [name for name in names if name not in SETUPS]:
        parser.exit(2, f"error: --setups: unknown {unknown}; choose from {', '.join(SETUPS)}\n")
    if len(names) < 2:
        parser.exit(2, "error: --setups: give the reference and at least one setup to compare with it\n")
    common = ["--limit", str(args.limit), "--seeds", str(args.seeds), "--engines", "1", "--batch-invariant",
              "--overwrite"]
    root = Path(tempfile.mkdtemp(prefix="quench-levers-"))
    first = names[0]
    rows = []
    for index, name in enumerate(names[1:]):
        reference_out = root / f"{first}-{index}"
        reference_wall, wall = run_side_by_side([(reference_out, SETUPS[first]), (root / name, SETUPS[name])], common)
        reference = completions(reference_out)
        got = completions(root / name)
        same = sum(got.get(key) == text for key, text in reference.items())
        reference_units, units = unit_outcomes(reference_out), unit_outcomes(root / name)
        agree = sum(units.get(key) == passed for key, passed in reference_units.items())
        rows.append((name, wall, reference_wall, f"{same}/{len(reference)}", f"{agree}/{len(reference_units)}"))
        print(f"{name}: {wall:.1f} s beside {first}'s {reference_wall:.1f} s; {same}/{len(reference)} completions "
              f"and {agree}/{len(reference_units)} units' outcomes equal", flush=True)
    print(f"\n| setup | wall s | {first} beside it, s | ratio (time) | completions equal to {first}'s | outcomes equal |")
    print("|---|---:|---:|---:|---|---|")
    for name, wall, reference_wall, same, agree in rows:
        print(f"| {name} | {wall:.1f} | {reference_wall:.1f} | {wall / reference_wall:.2f}x | {same} | {agree} |")
    print(f"\nrun directories: {root}")


if __name__ == "__main__":
    main()
