"""How close quench's perturbed HumanEval prompts are to ReCode's released ones, per profile.

For every transformation in a copy of ReCode's `dataset-release/` (HumanEval: `nominal/` and
`perturbed_finalized/humaneval/full/<category>/`, plain or gzipped JSONL), both profiles
(`quench`, `recode`) perturb HumanEval with the release's seeds and the table gives, side by side:

- exact: the share of (task, seed) prompts byte-identical to the release's;
- changed: the share of prompts that differ from their baseline (the full prompt, or the
  partial prompt for code syntax and format; the release's own baseline for the release);
- words: mean words edited per changed prompt (word-level diff against that baseline).

A variant that its transformation refuses (quench cannot write it: a rebuild that fails) counts as
unchanged and not exact.

The first row compares the partial-code prompts themselves with `nominal/humaneval_partial.jsonl`.

    python benchmarks/recode_fidelity.py --release DIR [--transforms A,B] [--seeds 10] [--json out.json]
"""

from __future__ import annotations

import argparse
import difflib
import gzip
import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from quench.datasets import Problem, load_humaneval
from quench.perturbations.base import CODE_FORMAT, CODE_SYNTAX
from quench.perturbations.catalog import perturbation_class
from quench.perturbations.pipeline import perturb_problems
from quench.perturbations.profile import PROFILES

FILE = re.compile(r"^humaneval_(?P<name>.+)_s(?P<seed>\d+)\.jsonl(\.gz)?$")


@dataclass(frozen=True)
class Shares:
    exact: float | None  # None: nothing to compare (no release rows)
    changed: float
    words: float  # per changed prompt


def read_rows(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def release_sets(root: Path) -> dict[str, dict[int, dict[str, dict]]]:
    """{transformation: {seed: {task_id: row}}} from every category folder under `root`."""
    sets: dict[str, dict[int, dict[str, dict]]] = {}
    for path in sorted(root.rglob("humaneval_*.jsonl*")):
        match = FILE.match(path.name)
        if match and "nominal" not in path.parts:
            rows = {row["task_id"]: row for row in read_rows(path)}
            sets.setdefault(match["name"], {})[int(match["seed"])] = rows
    return sets


def find(root: Path, name: str) -> Path | None:
    return next(iter(sorted(root.rglob(name + "*"))), None)


def edited_words(before: str, after: str) -> int:
    """Words replaced, inserted or deleted (the larger side of each differing run)."""
    matcher = difflib.SequenceMatcher(None, before.split(), after.split(), autojunk=False)
    return sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal")


def shares(prompts: list[str], baselines: list[str], reference: list[str] | None) -> Shares:
    changed = [(b, p) for b, p in zip(baselines, prompts) if p != b]
    words = sum(edited_words(b, p) for b, p in changed) / len(changed) if changed else 0.0
    exact = sum(p == r for p, r in zip(prompts, reference)) / len(prompts) if reference else None
    return Shares(exact, len(changed) / len(prompts) if prompts else 0.0, words)


def code_category(name: str) -> bool:
    return perturbation_class(name).category in (CODE_SYNTAX, CODE_FORMAT)


def profile_prompts(problems: list[Problem], names: list[str], seeds: list[int], profile: str
                    ) -> tuple[dict[str, dict[int, dict[str, str]]], float]:
    start = time.perf_counter()
    made = perturb_problems(problems, names, seeds, validate_variants=False, profile=profile)
    seconds = time.perf_counter() - start
    return {name: {seed: {v.task_id: v.prompt for v in made.variants[(name, seed)]} for seed in seeds}
            for name in names}, seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--release", type=Path, required=True,
                        help="ReCode's dataset-release (or a copy): nominal/ and the humaneval category folders")
    parser.add_argument("--transforms", default=None, help="comma-separated names (default: all in the release)")
    parser.add_argument("--seeds", type=int, default=10, help="at most this many of the release's seeds per transformation")
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = parser.parse_args()
    if not args.release.is_dir():
        print(f"error: --release {args.release}: not a directory", file=sys.stderr)
        return 2
    nominal_path = find(args.release, "humaneval_partial.jsonl")
    sets = release_sets(args.release)
    if nominal_path is None or not sets:
        print(f"error: --release {args.release}: no nominal/humaneval_partial.jsonl or no humaneval_* sets in it",
              file=sys.stderr)
        return 2
    problems = load_humaneval()
    by_id = {p.task_id: p for p in problems}
    nominal = {row["task_id"]: row for row in read_rows(nominal_path)}
    wanted = args.transforms.split(",") if args.transforms else None
    names = [n for n in sets if (wanted is None or n in wanted) and not perturbation_class(n).model_based]
    seeds = {n: sorted(sets[n])[:args.seeds] for n in names}
    all_seeds = sorted({s for n in names for s in seeds[n]})

    import black  # the formatter version decides the code-syntax rows
    print(f"HumanEval, {len(problems)} problems; black {black.__version__}")
    rows: dict[str, dict[str, object]] = {}
    partial_exact = {}
    made: dict[str, dict] = {}
    for profile in PROFILES:
        split = [PROFILES[profile].partial(p) for p in problems]
        partial_exact[profile] = sum(s.prompt == nominal[s.task_id]["prompt"] for s in split) / len(split)
        made[profile], seconds = profile_prompts(problems, names, all_seeds, profile)
        print(f"profile {profile}: {len(names)} transformations x {len(all_seeds)} seeds in {seconds:.1f} s")
    print("\n| transformation | seeds | exact quench | exact recode | changed release | changed quench | "
          "changed recode | words release | words quench | words recode |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| partial prompts | - | {partial_exact['quench']:.1%} | {partial_exact['recode']:.1%} | - | - | - | - | - | - |")
    for name in names:
        keys = [(seed, task) for seed in seeds[name] for task in sets[name][seed] if task in by_id]
        released = [sets[name][seed][task]["prompt"] for seed, task in keys]
        base_of = (lambda task: nominal[task]["prompt"]) if code_category(name) else (lambda task: by_id[task].prompt)
        release_shares = shares(released, [base_of(task) for _, task in keys], None)
        result = {"release": release_shares}
        for profile in PROFILES:
            own_base = [PROFILES[profile].partial(by_id[task]).prompt if code_category(name) else by_id[task].prompt
                        for _, task in keys]
            # a variant its transformation refused is left out of the set: it counts as unchanged, not exact
            prompts = [made[profile][name][seed].get(task, base) for (seed, task), base in zip(keys, own_base)]
            result[profile] = shares(prompts, own_base, released)
        rows[name] = {k: v.__dict__ for k, v in result.items()} | {"seeds": len(seeds[name])}
        q, r, rel = result["quench"], result["recode"], release_shares
        print(f"| {name} | {len(seeds[name])} | {q.exact:.1%} | {r.exact:.1%} | {rel.changed:.1%} | {q.changed:.1%} | "
              f"{r.changed:.1%} | {rel.words:.1f} | {q.words:.1f} | {r.words:.1f} |")
    if args.json:
        args.json.write_text(json.dumps({"partial_exact": partial_exact, "black": black.__version__,
                                         "transformations": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
