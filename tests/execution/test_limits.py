"""Calibrated per-problem limits, the re-run of a timeout, and verdicts that a busy machine does not change."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from typing import Iterator

import pytest
from sandbox_helpers import open_pool, skip_reason

from quench.datasets import Problem, load_humaneval
from quench.execution import Outcome, SandboxLimits, SandboxPool
from quench.execution import outcomes as outcomes_module
from quench.execution import pool as pool_module
from quench.execution.limits import FACTOR, Calibration, calibrate, calibrated_timeout, limit_for
from quench.execution.outcomes import ExecutionResult, ran_unhindered
from quench.execution.pressure import cpu_stall_us, stall_share

LIMITS = SandboxLimits(timeout_s=1.0, memory_mb=512)
# A reference that takes a few hundred ms of CPU: its limit is k times that, above the base.
SLOW = Problem("slow/0", "def work(n):\n", "    return sum(i * i for i in range(n))\n",
               "def check(f):\n    assert f(3_000_000) == sum(i * i for i in range(3_000_000))\n", "work")
FOREVER = "while True:\n    pass\n"
ASLEEP = "import time\ntime.sleep(30)\n"
SPIN_LIMIT_S = 3.0  # long beside the processes' start
SPINNERS = "import os\nfor _ in range(7):\n    if os.fork() == 0:\n        break\nwhile True:\n    pass\n"


class CountingPool:
    """The real pool, counting the programs it is given."""

    def __init__(self, pool: SandboxPool) -> None:
        self.pool, self.programs = pool, 0

    def imap(self, items, timeouts=None):
        items = list(items)
        self.programs += len(items)
        return self.pool.imap(items, timeouts)


@pytest.fixture(scope="module")
def pool() -> Iterator[SandboxPool]:
    mode = "bwrap" if skip_reason("bwrap") is None else "rlimits"
    if skip_reason(mode):
        pytest.skip(skip_reason(mode))
    with open_pool(mode, workers=2, limits=LIMITS) as sandbox:
        yield sandbox


def test_the_limit_is_k_times_the_reference_and_never_below_the_base() -> None:
    assert limit_for(0.01, 1.0) == 1.0
    assert limit_for(0.5, 1.0) == 0.5 * FACTOR
    assert limit_for(0.5, 1.0, factor=3.0) == 1.5
    assert limit_for(None, 2.5) == 2.5  # a reference that did not pass: nothing to scale


def test_each_reference_runs_once_and_its_limit_is_recorded(pool: SandboxPool) -> None:
    counting = CountingPool(pool)
    problems = [*load_humaneval()[:3], SLOW]
    first = calibrate(problems, counting, base_s=0.5)
    measured = counting.programs  # those an earlier test in this process has not timed
    assert measured <= len(problems)
    again = calibrate(problems, counting, base_s=0.5)
    assert counting.programs == measured  # the second call measured nothing
    assert first == again
    assert set(first.timeouts) == {p.task_id for p in problems}
    assert all(first.timeouts[t] == limit_for(first.reference_seconds[t], 0.5) for t in first.timeouts)
    assert first.timeouts["slow/0"] > 0.5 and first.to_json()["timeouts"] == first.timeouts
    assert calibrated_timeout(SLOW, counting, base_s=0.5) == first.timeouts["slow/0"]
    assert counting.programs == measured


def test_a_recorded_reference_time_is_used_instead_of_measuring(pool: SandboxPool) -> None:
    counting = CountingPool(pool)
    unmeasured = SLOW.with_changes(task_id="slow/1", canonical_solution=SLOW.canonical_solution + "    # recorded\n")
    calibration = calibrate([unmeasured], counting, base_s=0.5, recorded={"slow/1": 2.0})
    assert counting.programs == 0
    assert calibration.timeouts == {"slow/1": 2.0 * FACTOR} and calibration.reference_seconds == {"slow/1": 2.0}
    assert Calibration.from_json(json.loads(json.dumps(calibration.to_json()))) == calibration


def test_a_timeout_is_rerun_once_and_a_pass_the_second_time_is_flaky(pool: SandboxPool) -> None:
    # Sleeps past its limit only when it starts before `until`: the first run does, the re-run does not.
    until = time.time() + 0.6
    flaky = f"import time\nif time.time() < {until}:\n    time.sleep(30)\n"
    start = time.monotonic()
    flaky_result, stuck = pool.run_many([flaky, ASLEEP])
    assert (flaky_result.outcome, flaky_result.flaky_timeout) == (Outcome.passed, True), flaky_result
    assert flaky_result.to_json()["flaky_timeout"] is True
    assert (stuck.outcome, stuck.flaky_timeout) == (Outcome.timeout, False), stuck
    assert stuck.cpu_seconds is not None and stuck.cpu_seconds < 0.5 * LIMITS.timeout_s, stuck
    assert time.monotonic() - start >= 2 * LIMITS.timeout_s  # the stuck one ran twice
    assert "flaky_timeout" not in stuck.to_json() and "cpu_seconds" not in stuck.to_json()


def test_a_timeout_that_had_the_cpu_through_its_limit_while_no_task_waited_is_not_run_again(
        pool: SandboxPool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool_module, "cpu_stall_us", lambda: 0)  # the machine's count: no task ever waited
    # The share of the limit on the CPU, lowered: other tests' processes may hold the cores (ran_unhindered's own
    # test checks the 95%).
    monkeypatch.setattr(outcomes_module, "UNHINDERED_SHARE", 0.25)
    start = time.monotonic()
    spun, = pool.run_many([SPINNERS], timeouts=[SPIN_LIMIT_S])  # eight processes spinning
    took = time.monotonic() - start
    assert spun.outcome is Outcome.timeout and not spun.flaky_timeout, spun
    assert spun.cpu_seconds is not None and spun.cpu_seconds >= 0.25 * SPIN_LIMIT_S, spun
    assert took < 2 * SPIN_LIMIT_S, took  # one run: a second would end the same way


def test_a_timeout_while_tasks_waited_for_a_cpu_is_run_again(pool: SandboxPool, monkeypatch: pytest.MonkeyPatch) -> None:
    waited = iter(range(0, 10**12, 10**6))  # each reading a second more: some task always waits
    monkeypatch.setattr(pool_module, "cpu_stall_us", lambda: next(waited))
    start = time.monotonic()
    spun, = pool.run_many([SPINNERS])
    assert spun.outcome is Outcome.timeout and spun.cpu_seconds, spun
    assert time.monotonic() - start >= 2 * LIMITS.timeout_s  # its processes may each have waited: run again


def test_only_a_run_on_the_cpu_with_no_task_waiting_is_unhindered() -> None:
    spun = ExecutionResult(Outcome.timeout, cpu_seconds=0.96)
    assert ran_unhindered(spun, 1.0, 0.0) and ran_unhindered(spun, 1.0, 0.05)
    assert not ran_unhindered(spun, 1.0, 0.06)  # some task waited for a CPU
    assert not ran_unhindered(spun, 1.0, None)  # the kernel keeps no count here
    assert not ran_unhindered(replace(spun, cpu_seconds=0.9), 1.0, 0.0)  # it slept or waited on something
    assert not ran_unhindered(replace(spun, cpu_seconds=None), 1.0, 0.0)  # its CPU time is not known


def test_the_machines_cpu_stall_count_grows_while_more_processes_spin_than_there_are_cores(tmp_path) -> None:
    before = cpu_stall_us()
    if before is None:
        pytest.skip("this kernel keeps no CPU pressure count (/proc/pressure/cpu)")
    load = burners(2 * (os.cpu_count() or 1) + 1, seconds=1.0)
    for process in load:
        process.wait()
    share = stall_share(before, cpu_stall_us(), 1.0)
    assert share is not None and share > 0.1, share
    (tmp_path / "pressure").write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=1234\nfull total=0\n")
    assert cpu_stall_us(str(tmp_path / "pressure")) == 1234 and cpu_stall_us(str(tmp_path / "none")) is None


def test_each_program_runs_under_its_own_limit(pool: SandboxPool) -> None:
    sleeper = "import time\ntime.sleep(0.8)\n"
    short, long = pool.run_many([sleeper, sleeper], timeouts=[0.3, 3.0])
    assert short.outcome is Outcome.timeout and "0.3 s" in short.detail, short
    assert long.outcome is Outcome.passed, long


def burners(count: int, seconds: float) -> list[subprocess.Popen[bytes]]:
    """CPU-bound processes, each ending by itself after `seconds` at the latest."""
    loop = f"import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"
    return [subprocess.Popen([sys.executable, "-c", loop]) for _ in range(count)]


def test_the_same_verdicts_on_a_quiet_machine_and_next_to_cpu_bound_processes(pool: SandboxPool) -> None:
    humaneval = load_humaneval()[:12]
    problems = [*humaneval, SLOW]
    limits = calibrate(problems, pool, base_s=LIMITS.timeout_s).timeouts
    programs, timeouts = [], []
    for problem in problems:
        for completion in (problem.canonical_solution, "    return None\n"):
            programs.append(problem.program(completion))
            timeouts.append(limits[problem.task_id])
    programs.append(FOREVER)
    timeouts.append(LIMITS.timeout_s)
    quiet = [result.outcome for result in pool.run_many(programs, timeouts)]
    load = burners(3, seconds=60)
    try:
        loaded = [result.outcome for result in pool.run_many(programs, timeouts)]
    finally:
        for process in load:
            process.kill()
            process.wait()
    assert quiet == loaded
    assert quiet[-1] is Outcome.timeout and quiet.count(Outcome.passed) == len(problems)


def test_the_report_counts_confirmed_and_flaky_timeouts_apart() -> None:
    from quench.runs.evaluate import score
    from quench.runs.records import ResultRecord

    records = [ResultRecord.from_json({"task_id": "t/0", "sample_index": i, "passed": passed, "outcome": outcome, **extra})
               for i, (passed, outcome, extra) in enumerate([(True, "passed", {}), (True, "passed", {"flaky_timeout": True}),
                                                             (False, "timeout", {}), (False, "failed", {})])]
    assert score(records, [1]).outcomes == {"failed": 1, "flaky_timeout": 1, "passed": 2, "timeout": 1}
