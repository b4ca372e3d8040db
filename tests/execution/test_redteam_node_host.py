"""Red team against the warm JavaScript host: a Python program on its worker tries to take it over.

The host is a long-lived node in the worker's pid namespace, under the programs' uid. Every program
runs in a Landlock domain the host is outside of, and under a seccomp filter: the kernel refuses
it the host's memory (/proc/<pid>/mem, process_vm_readv), ptrace, signals, limits and priority.
After the attack, a wrong JavaScript answer must still fail and a right one pass, on the same host.
"""

from __future__ import annotations

from typing import Iterator

import pytest
from redteam_helpers import PRELUDE
from sandbox_helpers import is_node_host, process_tree, skip_reason

from quench.datasets import Problem
from quench.execution import Outcome, SandboxLimits, SandboxPool
from quench.execution.toolchains import has_toolchain, prepare_node_host, prepare_node_snapshot

RIGHT_JS = "function square(x) { return x * x; }\nif (square(2) !== 4) { throw new Error('wrong'); }\n"
WRONG_JS = "function square(x) { return x + 1; }\nif (square(3) !== 9) { throw new Error('wrong'); }\n"
SECRET_JS = "const secret = 'quench-secret-' + 'c0ffee';\nif (secret.length !== 20) { throw new Error('x'); }\n"
# Finds the host, then tries every way in; passes only if each is refused.
TAKEOVER = PRELUDE + """
hosts = []
for pid in os.listdir('/proc'):
    try:
        argv = open(f'/proc/{pid}/cmdline', 'rb').read().split(b'\\0') if pid.isdigit() else []
        if len(argv) > 1 and argv[1].endswith(b'node_host.js'):
            hosts.append(int(pid))
    except OSError:
        pass
assert len(hosts) == 1, hosts
host = hosts[0]
refused("open its memory read-write", lambda: open(f"/proc/{host}/mem", "r+b"))
refused("open its memory", lambda: open(f"/proc/{host}/mem", "rb"))
refused("read where it waits", lambda: open(f"/proc/{host}/syscall").read())
refused("read its maps", lambda: open(f"/proc/{host}/maps").read())
refused("write requests into its pipe", lambda: open(f"/proc/{host}/fd/0", "wb"))
refused("see where its pipes go", lambda: os.readlink(f"/proc/{host}/fd/3"))
refused("read its environment", lambda: open(f"/proc/{host}/environ", "rb").read())
refused("PTRACE_SEIZE", lambda: libc.ptrace(0x4206, host, 0, 0))
refused("PTRACE_ATTACH", lambda: libc.ptrace(16, host, 0, 0))
buffer = ctypes.create_string_buffer(4096)
local = (ctypes.c_void_p * 2)(ctypes.addressof(buffer), 4096)
remote = (ctypes.c_void_p * 2)(0x400000, 4096)
refused("process_vm_readv", lambda: libc.process_vm_readv(host, local, 1, remote, 1, 0))
refused("process_vm_writev", lambda: libc.process_vm_writev(host, local, 1, remote, 1, 0))
pidfd = os.pidfd_open(host)
refused("pidfd_getfd of its request pipe", lambda: libc.syscall(438, pidfd, 0, 0))
refused("prlimit NOFILE=4", lambda: resource.prlimit(host, resource.RLIMIT_NOFILE, (4, 4)))
refused("prlimit AS=64 MB", lambda: resource.prlimit(host, resource.RLIMIT_AS, (64 << 20, 64 << 20)))
refused("renice", lambda: os.setpriority(os.PRIO_PROCESS, host, 19))
refused("SIGSTOP", lambda: os.kill(host, signal.SIGSTOP))
refused("SIGKILL", lambda: os.kill(host, signal.SIGKILL))
"""


def javascript(text: str) -> str:
    return Problem("js", "", text, "", "main", language="javascript").reference_program()


@pytest.fixture(scope="module")
def js_pool() -> Iterator[SandboxPool]:
    reason = skip_reason("bwrap")
    if reason is not None:
        pytest.skip(reason)
    if not has_toolchain("javascript"):
        pytest.skip("no node with lodash here")
    prepare_node_snapshot()
    assert prepare_node_host() is not None, "the JavaScript host failed its check"
    with SandboxPool(1, SandboxLimits(timeout_s=5.0, timeout_retries=0), isolation="bwrap") as pool:
        yield pool


def host_pids(pool: SandboxPool) -> list[int]:
    return [pid for worker in pool.worker_pids() for pid in process_tree(worker) if is_node_host(pid)]


def test_a_python_program_cannot_take_over_the_host(js_pool: SandboxPool) -> None:
    results = js_pool.run_many([javascript(SECRET_JS), TAKEOVER, javascript(WRONG_JS), javascript(RIGHT_JS)])
    assert results[0].outcome is Outcome.passed, results[0].detail
    assert results[1].outcome is Outcome.passed, results[1].detail  # every way in was refused
    assert [r.outcome for r in results[2:]] == [Outcome.failed, Outcome.passed], [r.detail for r in results]


def test_the_host_is_confined_like_a_program(js_pool: SandboxPool) -> None:
    """The host runs programs' code: its own seccomp filter (and Landlock domain) keeps it from later programs."""
    js_pool.run_many([javascript(RIGHT_JS)])
    [host] = host_pids(js_pool)
    with open(f"/proc/{host}/status", encoding="ascii") as handle:
        status = dict(line.split(":\t", 1) for line in handle.read().splitlines() if ":\t" in line)
    assert status["Seccomp"].strip() == "2" and status["NoNewPrivs"].strip() == "1"


def test_the_host_survives_the_attack(js_pool: SandboxPool) -> None:
    js_pool.run_many([javascript(RIGHT_JS)])
    before = host_pids(js_pool)
    assert len(before) == 1
    js_pool.run_many([TAKEOVER, javascript(RIGHT_JS)])
    assert host_pids(js_pool) == before  # not killed, not replaced
