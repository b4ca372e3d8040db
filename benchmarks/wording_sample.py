"""A blind, seeded sample of changed default-profile docstring variants, labelled by reading them:
does the variant keep the task's meaning, and does it read as a person would write it?

    python benchmarks/wording_sample.py draw --seed 90421 --per-cell 14 --out LABELS
    python benchmarks/wording_sample.py score LABELS

LABELS: tests/perturbations/data/wording_labels.jsonl.

`draw` takes, per transformation and benchmark (HumanEval, MBPP's 500 test problems), `--per-cell`
distinct tasks at random among those the transformation changes at any of seeds 0-9 (seed 0 alone
for the deterministic tense transformations), each at one of its changing seeds, also at random.
Each row holds the changed sentences before and after, `meaning_kept` and `fluent` left empty
for the reader, and `why` for a reason where either is false. `score` prints each share with its
Wilson 95% interval and Clopper-Pearson exact interval, per transformation and over all.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import sys
from pathlib import Path

from quench.datasets import Problem, load_humaneval, load_mbpp
from quench.perturbations.base import apply_seeded
from quench.perturbations.catalog import create, perturbation_class
from quench.perturbations.text import docstring_text
from quench.stats.intervals import wilson_interval

TRANSFORMS = ("SynonymSubstitution", "SynonymInsertion", "EnglishInflectionalVariation",
              "TenseTransformationPast", "TenseTransformationFuture")
SENTENCE = re.compile(r"(?<=[.!?:])\s+")


def prose(problem: Problem, prompt: str) -> tuple[str, str]:
    """The docstring prose of `problem` and the same span of `prompt` (edits stay inside it)."""
    doc = docstring_text(problem)
    tail = len(problem.prompt) - doc.end
    return problem.prompt[doc.start:doc.end], prompt[doc.start:len(prompt) - tail]


def changed_sentences(original: str, perturbed: str) -> tuple[str, str]:
    """The sentences that differ, with their line breaks and indents as single spaces."""
    before = [" ".join(s.split()) for s in SENTENCE.split(original)]
    after = [" ".join(s.split()) for s in SENTENCE.split(perturbed)]
    if len(before) != len(after):
        return " ".join(before), " ".join(after)
    pairs = [(a, b) for a, b in zip(before, after) if a != b]
    return " ".join(a for a, _ in pairs), " ".join(b for _, b in pairs)


def draw(seed: int, per_cell: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for benchmark, problems in (("humaneval", load_humaneval()), ("mbpp", load_mbpp("test"))):
        for name in TRANSFORMS:
            transform = create(name)
            seeds = range(10) if perturbation_class(name).randomized else range(1)
            changing = []  # (problem, [seeds that change it])
            for problem in problems:
                hits = [s for s in seeds if apply_seeded(transform, problem, s).prompt != problem.prompt]
                if hits:
                    changing.append((problem, hits))
            for problem, hits in rng.sample(changing, min(per_cell, len(changing))):
                chosen = rng.choice(hits)
                variant = apply_seeded(transform, problem, chosen).prompt
                original, perturbed = changed_sentences(*prose(problem, variant))
                rows.append({"benchmark": benchmark, "task_id": problem.task_id, "transformation": name,
                             "seed": chosen, "original": original, "perturbed": perturbed,
                             "meaning_kept": None, "fluent": None, "why": ""})
    return rows


def binomial_tail(successes: int, trials: int, share: float, upper: bool) -> float:
    """P(X >= successes) where `upper`, else P(X <= successes), for X ~ Binomial(trials, share)."""
    counts = range(successes, trials + 1) if upper else range(0, successes + 1)
    return sum(math.comb(trials, k) * share ** k * (1 - share) ** (trials - k) for k in counts)


def solve(f, target: float) -> float:  # noqa: ANN001 - f increasing on [0, 1]
    low, high = 0.0, 1.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if f(middle) < target else (low, middle)
    return (low + high) / 2


def exact_interval(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Clopper-Pearson (1934): the shares whose binomial tail at `successes` is at least alpha/2."""
    alpha = 1 - confidence
    low = 0.0 if successes == 0 else solve(lambda p: binomial_tail(successes, trials, p, True), alpha / 2)
    high = 1.0 if successes == trials else solve(lambda p: -binomial_tail(successes, trials, p, False), -alpha / 2)
    return low, high


def score(rows: list[dict]) -> None:
    print("| transformation | n | meaning kept | Wilson 95% | exact 95% | fluent | Wilson 95% | exact 95% |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in (*TRANSFORMS, "all"):
        group = [r for r in rows if name in ("all", r["transformation"])]
        cells = []
        for field in ("meaning_kept", "fluent"):
            k, n = sum(bool(r[field]) for r in group), len(group)
            wilson, exact = wilson_interval(k, n), exact_interval(k, n)
            cells.append(f"{k}/{n} ({k / n:.1%}) | [{wilson.low:.1%}, {wilson.high:.1%}] | "
                         f"[{exact[0]:.1%}, {exact[1]:.1%}]")
        print(f"| {name} | {len(group)} | " + " | ".join(cells) + " |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("draw", help="draw a fresh sample to label")
    make.add_argument("--seed", type=int, required=True, help="the draw's random seed")
    make.add_argument("--per-cell", type=int, default=14, help="variants per transformation and benchmark")
    make.add_argument("--out", type=Path, required=True)
    tally = sub.add_parser("score", help="print the labelled shares with their intervals")
    tally.add_argument("labels", type=Path)
    args = parser.parse_args()
    if args.command == "draw":
        rows = draw(args.seed, args.per_cell)
        args.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        print(f"{len(rows)} variants written to {args.out}")
        return 0
    if not args.labels.is_file():
        print(f"error: {args.labels}: no such file", file=sys.stderr)
        return 2
    rows = [json.loads(line) for line in args.labels.read_text(encoding="utf-8").splitlines() if line.strip()]
    unlabelled = [r["task_id"] for r in rows if r["meaning_kept"] is None or r["fluent"] is None]
    if unlabelled:
        print(f"error: {args.labels}: {len(unlabelled)} rows not labelled, e.g. {unlabelled[0]}", file=sys.stderr)
        return 2
    score(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
