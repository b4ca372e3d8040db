"""Time and score every ReCode transformation on HumanEval (164) + MBPP (974), 5 seeds.

Perturbation time (the 60 s budget) and validation time are measured separately; the two
model-based transformations run on a small subset with the default model. Prints a markdown
table of share changed / share valid per transformation, with the variants refused and those the
sentence encoder scored below the meaning threshold (docs/perturbations.md quotes it).

    python benchmarks/perturb.py [--seeds 5] [--no-validate] [--model-subset 8] [--profile recode] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time

from quench.datasets import load_humaneval, load_mbpp
from quench.perturbations import names, perturb_problems


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--no-validate", action="store_true")
    parser.add_argument("--model-subset", type=int, default=8,
                        help="HumanEval problems for the model-based ones (0: skip)")
    parser.add_argument("--json", default=None, help="also write the numbers here")
    parser.add_argument("--profile", choices=["quench", "recode"], default="quench", help="perturbation profile")
    args = parser.parse_args()

    problems = load_humaneval() + load_mbpp("all")
    transforms = names(include_model_based=False)
    # CPU time as well as wall time: on a shared machine the wall clock measures the neighbours.
    wall, cpu = time.perf_counter(), time.process_time()
    perturb_problems(problems, transforms, args.seeds, validate_variants=False, profile=args.profile)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"{len(problems)} problems x {args.seeds} seeds x {len(transforms)} transformations")
    print(f"perturbation alone: {wall:.1f} s wall, {cpu:.1f} s CPU")
    result = perturb_problems(problems, transforms, args.seeds, validate_variants=not args.no_validate,
                              profile=args.profile)
    perturb_s = sum(s.seconds for s in result.stats.values())
    print(f"with validation: perturbation {perturb_s:.1f} s, validation {result.validation_seconds:.1f} s wall\n")
    check = result.meaning_check
    print(f"wording check: {check['encoder']} cosine >= {check['threshold']}" if check else
          "wording check: not run (pip install quench[meaning] for the sentence encoder)")
    print("| transformation | category | changed | valid | valid of changed | refused | below threshold | perturb s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for s in result.stats.values():
        print(f"| {s.name} | {s.category} | {s.share_changed:.1%} | {s.share_valid:.1%} | "
              f"{s.share_changed_valid:.1%} | {s.refused} | {s.meaning_failed} | {s.seconds:.2f} |")
    numbers = {"perturb_wall_seconds": wall, "perturb_cpu_seconds": cpu, "validation_seconds": result.validation_seconds,
               "summary": result.summary()}

    if args.model_subset:
        subset = load_humaneval()[:args.model_subset]
        start = time.perf_counter()
        from quench.perturbations.checked.model_based import HFTextModel

        model = HFTextModel.default()
        load_s = time.perf_counter() - start
        print(f"\nmodel-based, {len(subset)} HumanEval problems x 1 seed (model load {load_s:.1f} s):")
        for name in names(include_model_based=True):
            if name in transforms:
                continue
            small = perturb_problems(subset, [name], 1, validate_variants=not args.no_validate, model=model)
            s = small.stats[name]
            print(f"  {name}: {s.seconds / len(subset):.2f} s per problem, changed {s.share_changed:.0%}, "
                  f"valid {s.share_valid:.0%}")
            numbers[name] = {"seconds_per_problem": s.seconds / len(subset), "changed": s.share_changed,
                             "valid": s.share_valid}
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(numbers, out, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
