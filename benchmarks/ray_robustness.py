"""`quench robustness` end to end: one machine against Ray, through the real CLI.

    python benchmarks/ray_robustness.py                 # the figures in docs/ray.md
    python benchmarks/ray_robustness.py --repeats 1 --tasks 0-1

Setups, interleaved per repeat (best wall of the repeats is reported, ratios against local):
  local      `quench robustness` with a local engine (torch's default threads) and SandboxPool
  local-1t   the same with OMP_NUM_THREADS=1 (what each Ray actor uses)
  ray-auto   `--ray auto --ray-actors 2`: a private single-node Ray that the run starts and stops
             (its start-up and the actors' model loading included)
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
    args = parser.parse_args()
    common = ["--tasks", args.tasks, "--transforms", args.transforms, "--seeds", str(args.seeds),
              "--max-new-tokens", str(args.max_new_tokens), "--backend", "quench", "--dtype", "float32",
              "--batch-size", "8", "--workers", "2", "--timeout", "5", "--overwrite"]
    temp = tempfile.mkdtemp(prefix="qrb")
    setups = {"local": ([], {}), "local-1t": ([], {"OMP_NUM_THREADS": "1"}),
              "ray-auto": (["--ray", "auto", "--ray-actors", "2"], {})}
    walls: dict[str, list[float]] = {name: [] for name in setups}
    os.environ.pop("RAY_ADDRESS", None)  # --ray auto must start its own runtime
    for repeat in range(args.repeats):
        for name, (extra, env) in setups.items():
            walls[name].append(robustness(Path(temp) / name, common, extra, env))
            print(f"repeat {repeat}: {name} {walls[name][-1]:.1f} s", flush=True)
    reference = metrics(Path(temp) / "local")
    base = min(walls["local"])
    print(f"\n{'setup':<10} {'best wall s':>11} {'vs local':>9} {'all walls':>24}  same metrics")
    for name, times in walls.items():
        same = metrics(Path(temp) / name) == reference
        print(f"{name:<10} {min(times):>11.1f} {min(times) / base:>8.2f}x {', '.join(f'{t:.1f}' for t in times):>24}  {same}")
    print(f"\nrun directories: {temp}")


if __name__ == "__main__":
    main()
