"""A small robustness job on a quiet machine and next to one CPU-bound process, side by side.

Runs the same fixed `quench robustness` job (HumanEval 0-3, two transformations, greedy, short
answers; the default model) as a fresh run each time, with quench's default threads and with
`--threads 1`, first alone and then while one other process spins on a CPU, and prints the wall
times and the ratios: loaded / quiet per setting (target <= 1.6), and default / --threads 1 per
condition (target <= 1.0). `--torch-default` adds torch's own default (one thread per CPU,
OpenMP threads spin while they wait) for reference. `--kernels` instead times decode-sized
matrix products (batch 8, SmolLM2-135M's widths) under each OpenMP wait policy, in seconds.
`--decode` times `quench --threads N run` (HumanEval's first 16 prompts, 128 new tokens, one engine) at batch 1
and 8 under each wait policy (sleeping at once, quench's default, spinning), alone and next to one CPU-bound
process: generation tokens per second (the samples' tokens over the last one's finish).

Usage: python benchmarks/busy_machine.py [--tasks 0-3] [--max-new-tokens 32] [--torch-default] [--warm-up]
       python benchmarks/busy_machine.py --kernels
       python benchmarks/busy_machine.py --decode [--threads 2]
A machine that other jobs already share is not quiet: the printed load says how busy it was.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from quench.threads import prepare_openmp

TRANSFORMS = "FuncRenameCamelCase,new_line_afterdoc"  # deterministic: one variant per problem each
SPIN = "while True:\n    pass\n"
OPENMP_VARS = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")  # each run sets its own
KERNELS = """
import sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
x, w_up, w_down = torch.randn(8, 576), torch.randn(576, 1536), torch.randn(1536, 576)  # (B, d), (d, 4d), (4d, d)
for _ in range(50):
    (x @ w_up).relu() @ w_down
started = time.perf_counter()
for _ in range(3000):
    (x @ w_up).relu() @ w_down
print(time.perf_counter() - started)
"""


@dataclass(frozen=True)
class Setting:
    name: str
    flags: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()


def settings(torch_default: bool) -> list[Setting]:
    chosen = [Setting("default", ()), Setting("--threads 1", ("--threads", "1"))]
    if torch_default:
        cpus = str(len(os.sched_getaffinity(0)))
        chosen.append(Setting("torch default", ("--threads", cpus), (("OMP_WAIT_POLICY", "ACTIVE"),)))
    return chosen


def job(args: argparse.Namespace, out: Path) -> list[str]:
    return [
        sys.executable, "-m", "quench.cli.main", "robustness", "--tasks", args.tasks, "--transforms", TRANSFORMS,
        "--seeds", "1", "--max-new-tokens", str(args.max_new_tokens), "--out", str(out), "--overwrite",
    ]


def timed_run(args: argparse.Namespace, setting: Setting, scratch: Path) -> float:
    """Wall seconds of one fresh run of the job under `setting`."""
    out = scratch / f"run-{time.monotonic_ns()}"
    command = job(args, out)
    command[3:3] = list(setting.flags)  # global flags go before the subcommand
    env = run_environment(dict(setting.env))
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"error: {' '.join(command)} failed:\n{done.stderr[-2000:]}")
    return seconds


def run_environment(openmp: dict[str, str]) -> dict[str, str]:
    """This process's environment with `openmp` in place of its OpenMP variables."""
    return {key: value for key, value in os.environ.items() if key not in OPENMP_VARS} | openmp


@contextlib.contextmanager
def competing(loaded: bool) -> Iterator[None]:
    """`loaded`: one CPU-bound process runs beside the body, and is killed after it."""
    competitor = subprocess.Popen([sys.executable, "-c", SPIN]) if loaded else None
    try:
        yield
    finally:
        if competitor is not None:
            competitor.kill()
            competitor.wait()


def run_condition(args: argparse.Namespace, chosen: list[Setting], scratch: Path, loaded: bool) -> dict[str, float]:
    with competing(loaded):
        return {setting.name: timed_run(args, setting, scratch) for setting in chosen}


def print_table(quiet: dict[str, float], loaded: dict[str, float], loads: tuple[str, str]) -> None:
    print(f"load average before each condition: quiet {loads[0]}, loaded {loads[1]} (1, 5, 15 min)")
    print(f"{'setting':<16}{'quiet s':>10}{'loaded s':>10}{'loaded/quiet':>14}")
    for name in quiet:
        print(f"{name:<16}{quiet[name]:>10.1f}{loaded[name]:>10.1f}{loaded[name] / quiet[name]:>13.2f}x")
    print(f"default / --threads 1: quiet {quiet['default'] / quiet['--threads 1']:.2f}x, "
          f"loaded {loaded['default'] / loaded['--threads 1']:.2f}x (target <= 1.00x; loaded/quiet target <= 1.60x)")


def time_kernels(loaded: bool) -> dict[str, float]:
    """Seconds of the KERNELS loop per (wait policy, threads), alone or next to one spinning process."""
    cpus = len(os.sched_getaffinity(0))
    quench = {}
    prepare_openmp(quench)
    chosen = {f"active, {cpus} threads": ({"OMP_WAIT_POLICY": "ACTIVE"}, cpus),
              f"passive, {cpus} threads": ({"OMP_WAIT_POLICY": "PASSIVE"}, cpus),
              f"quench's, {cpus} threads": (quench, cpus), "1 thread": ({"OMP_WAIT_POLICY": "PASSIVE"}, 1)}
    times = {}
    with competing(loaded):
        for name, (policy, threads) in chosen.items():
            done = subprocess.run([sys.executable, "-c", KERNELS, str(threads)], env=run_environment(policy),
                                  capture_output=True, text=True, check=True)
            times[name] = float(done.stdout.split()[-1])
    return times


def print_kernels() -> None:
    loads = [load_average()]
    quiet = time_kernels(loaded=False)
    loads.append(load_average())
    loaded = time_kernels(loaded=True)
    print(f"3000 decode-sized MLP products; load average before: quiet {loads[0]}, loaded {loads[1]}")
    print(f"{'setting':<22}{'quiet s':>9}{'loaded s':>10}{'loaded/quiet':>14}{'vs 1 thread, loaded':>21}")
    for name in quiet:
        print(f"{name:<22}{quiet[name]:>9.2f}{loaded[name]:>10.2f}{loaded[name] / quiet[name]:>13.2f}x"
              f"{loaded[name] / loaded['1 thread']:>20.2f}x")


DECODE_POLICIES = {  # name -> the OpenMP variables of the run (quench's default: none set, the CLI chooses)
    "sleep at once": {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "0"},
    "quench's default": {},
    "spin (ACTIVE)": {"OMP_WAIT_POLICY": "ACTIVE"},
}


def decode_rate(threads: int, batch_size: int, policy: dict[str, str], out: Path) -> float:
    """Generation tokens per second of one fresh `quench run` under `policy`."""
    command = [sys.executable, "-m", "quench.cli.main", "--threads", str(threads), "run", "--benchmark", "humaneval",
               "--limit", "16", "--batch-size", str(batch_size), "--engines", "1", "--max-new-tokens", "128",
               "--out", str(out), "--overwrite"]
    done = subprocess.run(command, env=run_environment(policy), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"error: {' '.join(command)} failed:\n{done.stderr[-2000:]}")
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text(encoding="utf-8").splitlines()]
    return sum(s["num_tokens"] for s in samples) / max(s["finish_s"] for s in samples)


def print_decode(threads: int) -> None:
    rates: dict[tuple[str, int, bool], float] = {}
    loads = []
    with tempfile.TemporaryDirectory(prefix="quench-busy-") as scratch:
        for loaded in (False, True):
            loads.append(load_average())
            with competing(loaded):
                for name, policy in DECODE_POLICIES.items():
                    for batch_size in (1, 8):
                        rates[name, batch_size, loaded] = decode_rate(threads, batch_size, policy, Path(scratch) / "run")
    print(f"quench --threads {threads} run, HumanEval/0-15, 128 new tokens; tokens/s; load average before: "
          f"quiet {loads[0]}, loaded {loads[1]}")
    print("| wait | batch 1 quiet | batch 8 quiet | batch 1 loaded | batch 8 loaded |")
    print("|---|---:|---:|---:|---:|")
    for name in DECODE_POLICIES:
        cells = [rates[name, b, loaded] for loaded in (False, True) for b in (1, 8)]
        print(f"| {name} | " + " | ".join(f"{rate:.1f}" for rate in cells) + " |")


def load_average() -> str:
    return " ".join(open("/proc/loadavg", encoding="ascii").read().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="0-3")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--warm-up", action="store_true", help="one untimed run first (cold file cache, kernel build)")
    parser.add_argument("--torch-default", action="store_true", help="also time torch's own thread default")
    parser.add_argument("--kernels", action="store_true", help="time matrix products per OpenMP wait policy instead")
    parser.add_argument("--decode", action="store_true", help="time `quench run` per OpenMP wait policy instead")
    parser.add_argument("--threads", type=int, default=2, help="--decode: the runs' --threads")
    args = parser.parse_args()
    if args.kernels:
        print_kernels()
        return
    if args.decode:
        print_decode(args.threads)
        return
    chosen = settings(args.torch_default)
    with tempfile.TemporaryDirectory(prefix="quench-busy-") as scratch:
        if args.warm_up:
            timed_run(args, chosen[0], Path(scratch))
        loads = [load_average()]
        quiet = run_condition(args, chosen, Path(scratch), loaded=False)
        loads.append(load_average())
        loaded = run_condition(args, chosen, Path(scratch), loaded=True)
    print(f"job: quench robustness --tasks {args.tasks} --transforms {TRANSFORMS} --seeds 1 "
          f"--max-new-tokens {args.max_new_tokens}; {len(os.sched_getaffinity(0))} CPUs")
    print_table(quiet, loaded, (loads[0], loads[1]))


if __name__ == "__main__":
    main()
