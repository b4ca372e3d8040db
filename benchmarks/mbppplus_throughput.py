"""MBPP+ execution throughput: each reference solution on its base + extra inputs vs on MBPP's three asserts.

For the first N MBPP+ test problems (oracles computed first and not timed), runs the reference
solutions through the same SandboxPool twice: as MBPP+ programs (base then ~105 extra inputs, one
process each, quench.execution.plus) and as plain programs running MBPP's asserts (`Problem.program`).
Prints programs/s and inputs/s of each and the verdicts. Usage:
python benchmarks/mbppplus_throughput.py [--problems N] [--workers N]
"""

from __future__ import annotations

import argparse
import time

from quench.datasets import load_benchmark
from quench.datasets.mbppplus import plus_task
from quench.execution import SandboxLimits, SandboxPool
from quench.execution.plus import PlusPool, prepare_oracles, sandbox_limits
from quench.execution.program_build import program_for


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    problems = load_benchmark("mbpp+", "test", limit=args.problems)
    ids = [p.task_id for p in problems]
    prepare_oracles(ids, args.workers)
    limits = sandbox_limits(SandboxLimits(timeout_s=10.0), ids)
    inputs_plus = sum(len(plus_task(t).base_inputs) + len(plus_task(t).plus_inputs) for t in ids)
    inputs_base = sum(p.test.count("\n    assert ") for p in problems)
    with SandboxPool(args.workers, limits) as pool:
        pool.run_many(["pass"] * args.workers)  # warm the workers
        start = time.perf_counter()
        plus = dict(PlusPool(pool).imap((p.task_id, program_for(p, p.canonical_solution)) for p in problems))
        plus_s = time.perf_counter() - start
        start = time.perf_counter()
        base = pool.run_many([p.program(p.canonical_solution) for p in problems])
        base_s = time.perf_counter() - start
    both = sum(r.plus.passed for r in plus.values())
    print(f"{len(problems)} problems, {args.workers} workers")
    print(f"MBPP+ (base + extra inputs): {len(problems) / plus_s:.1f} programs/s, {inputs_plus / plus_s:.0f} inputs/s "
          f"({inputs_plus} inputs), {plus_s:.2f} s; references passing both test sets: {both}/{len(problems)}")
    print(f"MBPP asserts: {len(problems) / base_s:.1f} programs/s, {inputs_base / base_s:.0f} asserts/s "
          f"({inputs_base} asserts), {base_s:.2f} s; passing: {sum(r.passed for r in base)}/{len(problems)}")
    print(f"MBPP+ takes {plus_s / base_s:.1f}x the wall time of the asserts for {inputs_plus / inputs_base:.0f}x the tests")


if __name__ == "__main__":
    main()
