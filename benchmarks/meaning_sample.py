"""Draw a sample of kept word-level docstring variants to label by reading (docs/perturbations.md,
tests/perturbations/data/meaning_labels_kept.jsonl).

    quench perturb --benchmark humaneval --limit 164 --seeds 2 --transforms T --workers 1 --out HE
    quench perturb --benchmark mbpp --limit 500 --seeds 2 --transforms T --workers 1 --out MBPP
    python benchmarks/meaning_sample.py --humaneval HE --mbpp MBPP --seed 2027 --exclude DEV.jsonl --out sample.jsonl

T is the five transformations below, comma-separated; MBPP's 500 are its whole test split (the
first 200 left too few synonym edits outside the development sample); DEV.jsonl is
tests/perturbations/data/meaning_labels_kept_dev.jsonl. Each row is one distinct changed variant (original and perturbed
docstring prose), with `keeps` and `why` left for the reader to fill in.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from quench.datasets import Problem, load_humaneval, load_mbpp
from quench.perturbations.text import docstring_text

TRANSFORMS = ("SynonymSubstitution", "SynonymInsertion", "EnglishInflectionalVariation",
              "TenseTransformationPast", "TenseTransformationFuture")


def prose(problem: Problem, prompt: str) -> tuple[str, str]:
    """The docstring prose of `problem` and the same span of `prompt` (edits stay inside it)."""
    doc = docstring_text(problem)
    return problem.prompt[doc.start:doc.end], prompt[doc.start:len(prompt) - (len(problem.prompt) - doc.end)]


def candidates(dirs: dict[str, Path], seeds: int) -> list[dict]:
    """Every distinct changed variant in the `perturb` outputs (a deterministic one once, at its first seed)."""
    nominal = {p.task_id: p for p in [*load_humaneval(), *load_mbpp(None)]}
    found: dict[tuple, dict] = {}
    for benchmark, folder in dirs.items():
        for name in TRANSFORMS:
            for seed in range(seeds):
                for line in (folder / f"{benchmark}_{name}_s{seed}.jsonl").read_text(encoding="utf-8").splitlines():
                    row = json.loads(line)
                    if row["extra"].get("changed") != "true":
                        continue
                    original, perturbed = prose(nominal[row["task_id"]], row["prompt"])
                    if original != perturbed:
                        found.setdefault((benchmark, row["task_id"], name, perturbed), {
                            "benchmark": benchmark, "task_id": row["task_id"], "transformation": name,
                            "seed": seed, "original": original, "perturbed": perturbed, "keeps": None, "why": ""})
    return list(found.values())


def draw(pool: list[dict], seed: int, per_benchmark: int, excluded: set[tuple]) -> list[dict]:
    """Per transformation `per_benchmark` from MBPP where its pool allows, the rest of 2x from HumanEval."""
    rng = random.Random(seed)
    rows: list[dict] = []
    for name in TRANSFORMS:
        taken = 0
        for benchmark in ("mbpp", "humaneval"):
            group = sorted((c for c in pool if (c["benchmark"], c["task_id"], c["transformation"]) not in excluded
                            and c["benchmark"] == benchmark and c["transformation"] == name),
                           key=lambda c: (int(c["task_id"].split("/")[1]), c["seed"]))
            want = per_benchmark if benchmark == "mbpp" else 2 * per_benchmark - taken
            chosen = rng.sample(group, min(want, len(group)))
            rows += chosen
            taken += len(chosen)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--humaneval", type=Path, required=True, help="`quench perturb --benchmark humaneval` output")
    parser.add_argument("--mbpp", type=Path, required=True, help="`quench perturb --benchmark mbpp` output")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=2027, help="the draw's random seed")
    parser.add_argument("--per-benchmark", type=int, default=15)
    parser.add_argument("--exclude", type=Path, nargs="*", default=[], help="labelled samples whose tasks to leave out")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    excluded = {(r["benchmark"], r["task_id"], r["transformation"]) for path in args.exclude
                for r in map(json.loads, path.read_text(encoding="utf-8").splitlines())}
    rows = draw(candidates({"humaneval": args.humaneval, "mbpp": args.mbpp}, args.seeds), args.seed,
                args.per_benchmark, excluded)
    args.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    print(f"{len(rows)} variants written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
