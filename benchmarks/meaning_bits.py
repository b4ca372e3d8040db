"""How far the meaning check's cosines move between PyTorch's CPU kernels, thread counts and batches.

Each setting runs in a process of its own (PyTorch reads ATEN_CPU_CAPABILITY and ONEDNN_MAX_CPU_ISA at
start): the float32 scores of every changed word-level docstring variant of HumanEval (the model-free
transformations, `--seeds` seeds), batched as the meaning check batches them, and the float64 scores of
every `--every`-th pair encoded alone. Printed: how many float32 scores lie within `MARGIN` of the
threshold (where `decisive_similarity` takes the float64 score), then beside the first setting the
largest difference of each and how many float32 scores differ in some bit.

    python benchmarks/meaning_bits.py --seeds 5
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SETTINGS = {  # name -> environment
    "own": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "plain": {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41"},
    "one-thread": {"OMP_NUM_THREADS": "1"},
}
MODEL_FREE = ("SynonymSubstitution", "SynonymInsertion", "EnglishInflectionalVariation",
              "TenseTransformationPast", "TenseTransformationFuture")


def pairs(seeds: int) -> list[tuple[str, str]]:
    """(original prose, variant prose) of every changed model-free word-level variant."""
    from quench.datasets import load_benchmark
    from quench.perturbations.base import apply_seeded
    from quench.perturbations.catalog import create
    from quench.perturbations.validate import prose

    out = []
    for problem in load_benchmark("humaneval", "all"):
        for name in MODEL_FREE:
            for seed in range(seeds):
                variant = apply_seeded(create(name), problem, seed)
                if variant.prompt != problem.prompt:
                    out.append((prose(problem), prose(dataclasses.replace(problem, prompt=variant.prompt))))
    return out


def score(seeds: int, every: int, path: Path) -> None:
    from quench.perturbations import meaning

    texts = pairs(seeds)
    encoder = meaning.encoder()
    originals, variants = [a for a, _ in texts], [b for _, b in texts]
    single = encoder.similarity(originals, variants)
    exact = [encoder.exact_similarity(a, b) for a, b in texts[::every]]
    path.write_text(json.dumps({"float32": single, "float64": exact}))


def compare(seeds: int, every: int, names: list[str]) -> None:
    from quench.perturbations import meaning

    runs = {}
    with tempfile.TemporaryDirectory() as directory:
        for name in names:
            path = Path(directory) / f"{name}.json"
            subprocess.run([sys.executable, __file__, "--seeds", str(seeds), "--every", str(every), "--score", str(path)],
                           env={**os.environ, **SETTINGS[name]}, check=True)
            runs[name] = json.loads(path.read_text())
    base = runs[names[0]]
    f32 = base["float32"]
    print(f"{len(f32)} variants; float32 scores within {meaning.MARGIN:g} of the threshold: "
          f"{sum(abs(s - meaning.THRESHOLD) < meaning.MARGIN for s in f32)}; closest: "
          f"{min(abs(s - meaning.THRESHOLD) for s in f32):.3g}")
    print(f"| setting vs {names[0]} | float32 max diff | float32 scores differing | float64 max diff (every {every}th) |")
    print("|---|---:|---:|---:|")
    for name in names[1:]:
        other = runs[name]
        diff32 = max(abs(a - b) for a, b in zip(f32, other["float32"]))
        differing = sum(a != b for a, b in zip(f32, other["float32"]))
        diff64 = max(abs(a - b) for a, b in zip(base["float64"], other["float64"]))
        print(f"| {name} | {diff32:.2g} | {differing} | {diff64:.2g} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--every", type=int, default=10, help="float64 scores of every N-th pair")
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--score", type=Path, help=argparse.SUPPRESS)  # one setting's worker
    args = parser.parse_args()
    if args.score:
        score(args.seeds, args.every, args.score)
    else:
        compare(args.seeds, args.every, args.settings)


if __name__ == "__main__":
    main()
