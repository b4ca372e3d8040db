"""Helpers for the sandbox tests: limits, isolation modes and process-leak checks."""

from __future__ import annotations

import os
import signal
import time

from quench.execution import SandboxLimits, SandboxPool, bwrap_works

FAST = SandboxLimits(timeout_s=1.0, memory_mb=256)
MODES = ["bwrap", "rlimits"]


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as handle:
            return [int(child) for child in handle.read().split()]
    except OSError:
        return []


def process_tree(pid: int) -> list[int]:
    """`pid` and all its living descendants."""
    found, stack = [], [pid]
    while stack:
        current = stack.pop()
        if os.path.exists(f"/proc/{current}"):
            found.append(current)
            stack += children(current)
    return found


def pool_processes(pool: SandboxPool) -> list[int]:
    return [pid for worker in pool.worker_pids() for pid in process_tree(worker)]


def processes_with(marker: str) -> list[int]:
    """Living (non-zombie) processes anywhere whose command line contains `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                if marker.encode() in handle.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def wait_until_gone(marker: str, patience_s: float = 1.0) -> list[int]:
    """Processes still carrying `marker` after `patience_s` (SIGKILL delivery is asynchronous)."""
    give_up = time.monotonic() + patience_s
    while (left := processes_with(marker)) and time.monotonic() < give_up:
        time.sleep(0.02)
    return left


def available(mode: str) -> bool:
    return mode != "bwrap" or bwrap_works()


def worker_node(cluster):
    """A node of a `ray.cluster_utils.Cluster` other than the head's (the driver lives on the head)."""
    return next(node for node in cluster.list_all_nodes() if node is not cluster.head_node)


def kill_node(cluster, node) -> None:
    """As if the machine died: remove the node and SIGKILL every process under its raylet.

    A lost machine takes its workers with it; `remove_node` alone kills the raylet, and a worker
    would go on with the work already pushed to it until it noticed.
    """
    doomed = [pid for info in node.all_processes.get("raylet", []) for pid in process_tree(info.process.pid)]
    cluster.remove_node(node, allow_graceful=False)
    for pid in doomed:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
