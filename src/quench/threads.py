"""CPU threads for torch: a default that holds when other processes share the machine.

Torch's default, one OpenMP thread per core with spin-waiting, collapses as soon as another
process takes a core: at every parallel region the running threads spin until the descheduled
one gets its turn. quench instead (benchmarks/busy_machine.py measures it):
- lets a waiting OpenMP thread spin only briefly before it sleeps (OMP_WAIT_POLICY=PASSIVE with
  GOMP_SPINCOUNT=SPIN_COUNT, microseconds), so a spinning thread never holds a core for long that a
  descheduled sibling or another process needs, while on quiet cores the next parallel region of a
  step finds its threads still awake: waking a sleeping thread at each of a small step's parallel
  regions costs more than their work (docs/benchmarks.md, "A busy machine");
- starts one thread per CPU it may use (affinity and cgroup quota) that is not already busy.
Both are environment variables read when torch loads, so `prepare_openmp` runs before any heavy
import; an explicit --threads, OMP_WAIT_POLICY, GOMP_SPINCOUNT or OMP_NUM_THREADS always wins.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from dataclasses import dataclass
from typing import MutableMapping

from quench.errors import QuenchError

log = logging.getLogger(__name__)

SAMPLE_S = 0.1  # how long the CPUs' load is watched before choosing
SPIN_COUNT = 1_000  # libgomp's busy-wait iterations before a waiting thread sleeps (its default: 300,000)


@dataclass(frozen=True)
class ThreadChoice:
    threads: int
    reason: str  # for the log: where the number comes from


def prepare_openmp(environ: MutableMapping[str, str] = os.environ) -> list[str]:
    """Before torch (or any OpenMP library) loads: waiting threads spin briefly, then sleep.

    A wait policy the caller chose is left as it is, spin count included. Returns the variables it set."""
    if "OMP_WAIT_POLICY" in environ:
        return []
    chosen = {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": str(SPIN_COUNT)}
    added = [name for name in chosen if name not in environ]
    for name in added:
        environ[name] = chosen[name]
    return added


def usable_cpus() -> list[int]:
    """The CPUs this process may run on, cut to the cgroup's CPU quota (docker --cpus) if any."""
    cpus = sorted(os.sched_getaffinity(0))
    try:
        quota, period = open("/sys/fs/cgroup/cpu.max", encoding="ascii").read().split()
    except (OSError, ValueError):
        return cpus
    if quota == "max":
        return cpus
    return cpus[: max(1, math.ceil(int(quota) / int(period)))]


def busy_cpus(cpus: list[int], seconds: float = SAMPLE_S) -> float:
    """How many of `cpus` other work keeps busy, from /proc/stat over `seconds` (0.0 if unreadable)."""
    before = _cpu_times(cpus)
    time.sleep(seconds)
    after = _cpu_times(cpus)
    busy = 0.0
    for cpu in cpus:
        if cpu not in before or cpu not in after:
            continue
        (total0, idle0), (total1, idle1) = before[cpu], after[cpu]
        if total1 > total0:
            busy += 1.0 - (idle1 - idle0) / (total1 - total0)
    return busy


def _cpu_times(cpus: list[int]) -> dict[int, tuple[int, int]]:
    """cpu -> (total, idle + iowait) jiffies."""
    wanted = {f"cpu{cpu}": cpu for cpu in cpus}
    times: dict[int, tuple[int, int]] = {}
    try:
        lines = open("/proc/stat", encoding="ascii").read().splitlines()
    except OSError:
        return times
    for line in lines:
        name, *fields = line.split()
        if name in wanted:
            values = [int(value) for value in fields[:8]]
            times[wanted[name]] = (sum(values), values[3] + values[4])
    return times


def choose_threads(requested: int | None, environ: MutableMapping[str, str] = os.environ) -> ThreadChoice:
    """`requested` (--threads), else OMP_NUM_THREADS, else one per usable CPU that is not busy now."""
    if requested is not None:
        return ThreadChoice(requested, "--threads")
    if environ.get("OMP_NUM_THREADS", "").isdigit() and int(environ["OMP_NUM_THREADS"]) > 0:
        return ThreadChoice(int(environ["OMP_NUM_THREADS"]), "OMP_NUM_THREADS")
    cpus = usable_cpus()
    busy = busy_cpus(cpus)
    threads = max(1, min(len(cpus), int(len(cpus) - busy + 0.5)))
    return ThreadChoice(threads, f"{len(cpus)} usable CPUs, {busy:.1f} busy with other work")


def configure_threads(requested: int | None, environ: MutableMapping[str, str] = os.environ) -> ThreadChoice:
    """Set torch's CPU threads: through the environment before torch loads, directly after."""
    if requested is not None and requested < 1:
        raise QuenchError(f"--threads must be at least 1, got {requested}")
    choice = choose_threads(requested, environ)
    environ["OMP_NUM_THREADS"] = str(choice.threads)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(choice.threads)
    log.info("torch CPU threads: %d (%s), OpenMP wait policy %s, spin count %s", choice.threads, choice.reason,
             environ.get("OMP_WAIT_POLICY", "default"), environ.get("GOMP_SPINCOUNT", "default"))
    return choice
