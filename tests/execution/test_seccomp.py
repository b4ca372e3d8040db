"""The seccomp filter in a real process: what it refuses, what it lets a process do to itself."""

from __future__ import annotations

import platform
import subprocess
import sys
import textwrap

import pytest

from quench.execution.seccomp import SYSCALLS, program_filter

PROBE = textwrap.dedent("""
    import ctypes, os, resource
    from quench.execution.seccomp import install, prepare, program_filter
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(38, 1, 0, 0, 0)  # no_new_privs, as the fork server sets it
    install(prepare(program_filter()))
    def outcome(call):
        try:
            result = call()
        except OSError as err:
            return "EPERM" if err.errno == 1 else f"errno {err.errno}"
        return "EPERM" if result == -1 and ctypes.get_errno() == 1 else "allowed"
    parent = os.getppid()
    print(outcome(lambda: libc.shmget(0, 4096, 0o1000 | 0o600)))
    print(outcome(lambda: libc.msgget(0, 0o1000 | 0o600)))
    print(outcome(lambda: libc.ptrace(0x4206, parent, 0, 0)))
    print(outcome(lambda: resource.prlimit(parent, resource.RLIMIT_NOFILE)))
    print(outcome(lambda: os.setpriority(os.PRIO_PROCESS, parent, 1)))
    print(outcome(lambda: os.setpriority(os.PRIO_USER, 0, 1)))
    print(outcome(lambda: resource.prlimit(0, resource.RLIMIT_NOFILE)))
    print(outcome(lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))))
    print(outcome(lambda: os.nice(1)))
    print(outcome(lambda: os.sched_setaffinity(0, os.sched_getaffinity(0))))
""")


def test_refused_calls_and_calls_on_itself() -> None:
    if platform.machine() not in SYSCALLS:
        pytest.skip(f"no filter for {platform.machine()}")
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:10] == ["EPERM"] * 6 + ["allowed"] * 4


def test_no_filter_for_an_unknown_architecture() -> None:
    assert program_filter("pdp11") is None
    assert len(program_filter("x86_64")) % 8 == 0 and len(program_filter("aarch64")) % 8 == 0
