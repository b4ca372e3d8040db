"""How often each docstring transformation changes a prompt: ReCode's against quench's default profile.

Per transformation, the share of (task, seed) prompts that differ from the nominal prompt:

- release: ReCode's released HumanEval sets (`--release`, ReCode's `dataset-release/`);
- recode: the `recode` profile, which reproduces ReCode's transformations byte for byte, on
  HumanEval and on MBPP (ReCode released no MBPP sets here, so this stands in for them);
- quench: the default `quench` profile, changed at all and changed and kept by the meaning check
  (the sentence encoder; `-` where it is not installed).

Seeds are the release's (0-9; 0 alone for the deterministic tense transformations).

    python benchmarks/change_shares.py --release DIR [--mbpp-split test] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from quench.datasets import Problem, load_humaneval, load_mbpp
from quench.perturbations import meaning
from quench.perturbations.catalog import perturbation_class
from quench.perturbations.pipeline import perturb_problems
from quench.perturbations.validate import prose

TRANSFORMS = ("SynonymSubstitution", "SynonymInsertion", "EnglishInflectionalVariation",
              "TenseTransformationPast", "TenseTransformationFuture")
sys.path.insert(0, str(Path(__file__).parent))
from recode_fidelity import release_sets  # noqa: E402  (a sibling benchmark script)


def seeds_of(name: str) -> list[int]:
    return list(range(10)) if perturbation_class(name).randomized else [0]


def changed_shares(problems: list[Problem], name: str, profile: str, meaning_check: bool) -> tuple[float, float | None]:
    """Shares of (task, seed) variants that differ from the nominal prompt, and that differ and pass
    the meaning check (the encoder's cosine of the prose at least `meaning.THRESHOLD`; None unchecked)."""
    seeds = seeds_of(name)
    made = perturb_problems(problems, [name], seeds, validate_variants=False, profile=profile, meaning_check=False)
    by_id = {p.task_id: p for p in problems}
    changed = [(by_id[v.task_id], v) for seed in seeds for v in made.variants[(name, seed)]
               if v.prompt != by_id[v.task_id].prompt]
    total = len(problems) * len(seeds)
    if not meaning_check:
        return len(changed) / total, None
    scores = meaning.encoder().similarity([prose(a) for a, _ in changed], [prose(b) for _, b in changed])
    return len(changed) / total, sum(meaning.keeps_meaning(s) for s in scores) / total


def release_share(sets: dict, name: str, nominal: dict[str, str]) -> float:
    rows = [(task, row["prompt"]) for seed in seeds_of(name) for task, row in sets[name][seed].items()]
    return sum(prompt != nominal[task] for task, prompt in rows) / len(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--release", type=Path, required=True, help="ReCode's dataset-release (or a copy)")
    parser.add_argument("--mbpp-split", default="test", help="MBPP split (test: its 500 problems; all: 974)")
    parser.add_argument("--transforms", default=",".join(TRANSFORMS), help="comma-separated names")
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = parser.parse_args()
    if not args.release.is_dir():
        print(f"error: --release {args.release}: not a directory", file=sys.stderr)
        return 2
    sets = release_sets(args.release)
    names = args.transforms.split(",")
    missing = [n for n in names if n not in sets]
    if missing:
        print(f"error: --release {args.release}: no humaneval sets for {', '.join(missing)}", file=sys.stderr)
        return 2
    mbpp = load_mbpp(None if args.mbpp_split == "all" else args.mbpp_split)
    benchmarks = {"HumanEval": load_humaneval(), "MBPP": mbpp}
    nominal = {p.task_id: p.prompt for p in benchmarks["HumanEval"]}
    checked = meaning.available()
    print(f"HumanEval {len(benchmarks['HumanEval'])} problems, MBPP {len(benchmarks['MBPP'])} ({args.mbpp_split}); "
          f"meaning check: {'all-MiniLM-L6-v2, threshold ' + str(meaning.THRESHOLD) if checked else 'not installed'}")
    print("\n| transformation | seeds | ReCode release HE | ReCode profile HE | ReCode profile MBPP | "
          "quench HE | quench MBPP | quench kept HE | quench kept MBPP |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    rows: dict[str, dict[str, float | None]] = {}
    for name in names:
        row: dict[str, float | None] = {"release_humaneval": release_share(sets, name, nominal)}
        for label, problems in benchmarks.items():
            key = label.lower()
            row[f"recode_{key}"] = changed_shares(problems, name, "recode", meaning_check=False)[0]
            row[f"quench_{key}"], row[f"quench_kept_{key}"] = changed_shares(problems, name, "quench", checked)
        rows[name] = row
        cells = [row["release_humaneval"], row["recode_humaneval"], row["recode_mbpp"], row["quench_humaneval"],
                 row["quench_mbpp"], row["quench_kept_humaneval"], row["quench_kept_mbpp"]]
        shown = " | ".join("-" if c is None else f"{c:.1%}" for c in cells)
        print(f"| {name} | {len(seeds_of(name))} | {shown} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
