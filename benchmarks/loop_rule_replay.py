"""A loop rule replayed on a finished greedy robustness run: the tokens it saves and the verdicts it changes.

    python benchmarks/loop_rule_replay.py RUN_DIR [--span 300] [--max-period 1024] [--numbers-span 200]
        [--numbers-repeats 4] [--count-prompt-spans]

A greedy answer's text up to any point is the same whether or not a rule stops it there (with a batch-invariant
engine, at any batch), so feeding each answer the run kept to another rule gives the answer that rule gives,
wherever it stops earlier than the run's own rule did (answers the run's rule stopped that the other would have
let go on are beyond a replay: counted as unchanged). Prints, per finish reason, the answers the rule cuts
and the tokens it saves (each answer's tokens times the share of its characters cut), then runs every changed
program and the run's own program of the same sample in quench's sandbox and counts the verdicts that differ.
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

from quench.datasets import load_benchmark
from quench.execution.pool import SandboxPool
from quench.execution.program_build import program_for
from quench.execution.sanitize import sanitize
from quench.robustness.pipeline import SAMPLES_FILE, VARIANTS_FILE, problems_by_variant, read_variants
from quench.stopping.loop_rule import LOOP_RULE, LoopRule, LoopScanner


def run_problems(run_dir: Path) -> tuple[dict, str]:
    config = json.loads((run_dir / "config.json").read_text())
    tasks = set(config["tasks"])
    problems = [p for p in load_benchmark(config["benchmark"], split=config.get("split") or "test") if p.task_id in tasks]
    return problems_by_variant(problems, read_variants(run_dir / VARIANTS_FILE)), config.get("prompt_format", "chat")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--span", type=int, default=LOOP_RULE.span)
    parser.add_argument("--numbers-span", type=int, default=LOOP_RULE.numbers_span)
    parser.add_argument("--numbers-repeats", type=int, default=LOOP_RULE.numbers_repeats)
    parser.add_argument("--max-period", type=int, default=LOOP_RULE.max_period)
    parser.add_argument("--count-prompt-spans", action="store_true", help="the exact part counts a span the prompt holds too")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    rule = LoopRule(span=args.span, max_period=args.max_period, numbers_span=args.numbers_span,
                    numbers_repeats=args.numbers_repeats, exempt_spans=not args.count_prompt_spans)
    table, prompt_format = run_problems(args.run_dir)
    samples = [json.loads(line) for line in (args.run_dir / SAMPLES_FILE).read_text().splitlines()]
    cut, saved, pairs, unknown = collections.Counter(), collections.Counter(), [], 0
    for sample in samples:
        raw, problem = sample["raw"], table[(sample["task_id"], sample["variant"])]
        stop = LoopScanner(rule, problem.prompt).feed(raw)
        if stop is None and sample["finish_reason"] == "hook":
            unknown += 1
        if stop is None or stop >= len(raw):
            continue
        reason = sample["finish_reason"]
        cut[reason] += 1
        saved[reason] += sample["num_tokens"] * (1 - stop / len(raw))
        new = sanitize(problem, raw[:stop], prompt_format)
        old_program = program_for(problem, sample["completion"], sample["solution"])
        new_program = program_for(problem, new.completion, new.solution)
        if new_program != old_program:
            pairs.append((reason, old_program, new_program))
    total = sum(s["num_tokens"] for s in samples)
    print(f"rule: {rule.settings()}")
    print(f"{len(samples)} answers, {total} tokens; the rule cuts {sum(cut.values())} answers earlier")
    for reason in sorted(cut):
        print(f"  ended by {reason}: {cut[reason]} cut, {saved[reason]:.0f} tokens saved")
    print(f"tokens saved: {sum(saved.values()):.0f} ({100 * sum(saved.values()) / total:.1f}%)")
    print(f"answers the run's rule stopped and this one does not (their rest is unknown, counted as unchanged): {unknown}")
    with SandboxPool(workers=args.workers) as pool:
        old = pool.run_many([p[1] for p in pairs])
        new = pool.run_many([p[2] for p in pairs])
    flips = collections.Counter((r, a.passed, b.passed) for (r, _, _), a, b in zip(pairs, old, new) if a.passed != b.passed)
    print(f"programs changed: {len(pairs)}; verdicts changed: {sum(flips.values())}")
    for (reason, before, after), count in sorted(flips.items()):
        print(f"  ended by {reason}: passed {before} -> {after}: {count}")


if __name__ == "__main__":
    main()
