"""`quench robustness` end to end through the real CLI: local against Ray, quench's engine against HF.

    python benchmarks/robustness_cli.py                                  # Ray figures in docs/ray.md
    python benchmarks/robustness_cli.py --setups quench-1t,hf-1t --repeats 1   # docs/robustness.md
    python benchmarks/robustness_cli.py --setups plain,defaults --dtype auto    # the auto defaults: docs/benchmarks.md

Setups, interleaved per repeat (best wall of the repeats is reported, ratios against local):
  local      `quench robustness` with a local engine (torch's default threads) and SandboxPool
  local-1t   the same with OMP_NUM_THREADS=1 (what each Ray actor uses)
  ray-auto   `--ray auto --ray-actors 2`: a private single-node Ray that the run starts and stops
             (its start-up and the actors' model loading included)
  quench-1t  `--threads 1` (the default backend, quench's engine)
  hf-1t      `--threads 1 --backend hf` (Hugging Face generate)
  plain      one engine, batch 8, no speculation (`--engines 1 --batch-size 8 --speculate none`), 2 threads
  defaults   no engine flags (engines, batch size and speculation `auto`: quench.cli.work_settings), 2 threads
Every setup but `defaults` runs at batch 8.
Two-node clusters are measured with `ray.cluster_utils.Cluster` in benchmarks/ray_scaleout.py.
Every setup must write the same metrics (float32, greedy: batch layout cannot change a token).
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

def robustness(out: Path, common: list[str], extra: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "quench.cli.main", "robustness", *common, *extra, "--out", str(out)],
                          capture_output=True, text=True, env={**os.environ, **env})
    if done.returncode != 0:
        raise SystemExit(f"{out.name} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - started


def metrics(out: Path) -> dict:
    """The run's metrics without its timing (`run_info`)."""
    return {k: v for k, v in json.loads((out / "metrics.json").read_text()).items() if k != "run_info"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default="0-3")
    parser.add_argument("--transforms", default="FuncRenameCamelCase,tab_indent,SynonymSubstitution,DeadCodeInserter")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--setups", default="local,local-1t,ray-auto", help="comma-separated, in the order run")
    parser.add_argument("--dtype", default="float32", help="float32: greedy tokens cannot depend on the batch layout")
    args = parser.parse_args()
    common = ["--tasks", args.tasks, "--transforms", args.transforms, "--seeds", str(args.seeds),
              "--max-new-tokens", str(args.max_new_tokens), "--dtype", args.dtype,
              "--workers", "2", "--timeout", "5", "--overwrite"]
    temp = tempfile.mkdtemp(prefix="qrb")
    one = ["--engines", "1", "--batch-size", "8", "--speculate", "none"]
    known = {"local": (one, {}), "local-1t": (one, {"OMP_NUM_THREADS": "1"}),
             "ray-auto": (["--ray", "auto", "--ray-actors", "2", "--batch-size", "8", "--speculate", "none"], {}),
             "quench-1t": (["--backend", "quench", *one], {"OMP_NUM_THREADS": "1"}),
             "hf-1t": (["--backend", "hf", "--batch-size", "8"], {"OMP_NUM_THREADS": "1"}),
             "plain": (one, {"OMP_NUM_THREADS": "2"}), "defaults": ([], {"OMP_NUM_THREADS": "2"})}
    names = [name.strip() for name in args.setups.split(",") if name.strip()]
    if unknown := [name for name in names if name not in known]:
        raise SystemExit(f"--setups: unknown {unknown}; choose from {', '.join(known)}")
    setups = {name: known[name] for name in names}
    walls: dict[str, list[float]] = {name: [] for name in setups}
    os.environ.pop("RAY_ADDRESS", None)  # --ray auto must start its own runtime
    for repeat in range(args.repeats):
        for name, (extra, env) in setups.items():
            walls[name].append(robustness(Path(temp) / name, common, extra, env))
            print(f"repeat {repeat}: {name} {walls[name][-1]:.1f} s", flush=True)
    first = names[0]
    reference = metrics(Path(temp) / first)
    base = min(walls[first])
    print(f"\n{'setup':<10} {'best wall s':>11} {'vs first':>9} {'all walls':>24}  same metrics")
    for name, times in walls.items():
        same = metrics(Path(temp) / name) == reference
        print(f"{name:<10} {min(times):>11.1f} {min(times) / base:>8.2f}x {', '.join(f'{t:.1f}' for t in times):>24}  {same}")
    print(f"\nrun directories: {temp}")


if __name__ == "__main__":
    main()
