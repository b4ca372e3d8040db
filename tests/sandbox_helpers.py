"""Helpers for the sandbox tests: limits, isolation modes and process-leak checks."""

from __future__ import annotations

import functools
import os
import shutil
import signal
import sys
import time

from quench.execution import SandboxLimits, SandboxPool, bwrap_works
from quench.execution.sandbox import drop_problem_for

FAST = SandboxLimits(timeout_s=1.0, memory_mb=256, timeout_retries=0)  # timeouts here are meant
MODES = ["bwrap", "rlimits"]  # the two ways quench confines programs
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"


@functools.lru_cache(maxsize=1)
def nobody_python() -> str | None:
    """An interpreter whose directories `nobody` can read, so "rlimits" mode can drop to it; else None.

    This interpreter when it qualifies, else the system's python3 (the fork server needs only the stdlib).
    """
    for candidate in (sys.executable, shutil.which("python3", path=SYSTEM_PATH)):
        if candidate and drop_problem_for(candidate) is None:
            return candidate
    return None


def mode_python(mode: str) -> str | None:
    """The interpreter a pool of `mode` runs programs with (None: this one)."""
    return nobody_python() if mode == "rlimits" else None


def skip_reason(mode: str) -> str | None:
    """Why `mode` cannot be tested here, or None."""
    if mode == "bwrap" and not bwrap_works():
        return "bubblewrap cannot create namespaces here"
    if mode == "rlimits" and nobody_python() is None:
        return "no Python interpreter that nobody can read, or not root: programs cannot drop to nobody here"
    return None


def needs_language(language: str) -> None:
    """Skip the calling test unless bubblewrap and `language`'s toolchain are here."""
    from quench.execution.toolchains import has_toolchain

    reason = skip_reason("bwrap")
    if reason is not None:
        pytest.skip(reason)
    if not has_toolchain(language):
        pytest.skip(f"no {language} toolchain here")


def open_pool(mode: str, workers: int = 2, limits: SandboxLimits = FAST) -> SandboxPool:
    return SandboxPool(workers, limits, isolation=mode, python=mode_python(mode))


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
    """The pool's processes but the warm node each worker may keep for JavaScript (its host)."""
    return [pid for worker in pool.worker_pids() for pid in process_tree(worker) if not is_node_host(pid)]


def is_node_host(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = handle.read().split(b"\0")
    except OSError:
        return False
    return len(argv) > 1 and argv[1].endswith(b"node_host.js")


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
    return skip_reason(mode) is None


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
