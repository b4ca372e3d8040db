"""Hostile programs: each must end with the right outcome, the pool alive, no process left behind.

Every test runs once per way quench confines programs: "bwrap" (namespaces, nobody) and
"rlimits" (no namespaces, programs dropped to a uid of their own). quench refuses to run programs unconfined
unless told to (see test_confinement.py), so every case here must hold in both modes.
"""

from __future__ import annotations

import os
import signal
import socket
import textwrap
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from sandbox_helpers import open_pool, pool_processes, wait_until_gone
from quench.execution import Outcome, SandboxPool
from quench.execution import pool as pool_module

CHECK = "def check(candidate):\n    assert candidate(2) == 4\n"
RIGHT = "def square(x):\n    return x * x\n"
WRONG = "def square(x):\n    return x + 1\n"


# Prefixed to the programs that would harm the machine if a regression ran them unconfined:
# they end early instead (crashed, so the test fails) rather than kill or delete outside the sandbox.
# Harmful code runs only as a sandbox's user: never as the caller's (were confinement broken).
ONLY_AS_NOBODY = f"import os\nif os.getuid() in (0, {os.geteuid()}):\n    os._exit(3)\n"


def program(body: str, solution: str = RIGHT, harmful: bool = False) -> str:
    """A HumanEval-shaped program: solution, hostile body, then the tests."""
    guard = ONLY_AS_NOBODY if harmful else ""
    return f"{solution}\n{guard}{textwrap.dedent(body)}\n{CHECK}\ncheck(square)\n"


def run_one(pool: SandboxPool, source: str) -> tuple[Outcome, str, float]:
    [result] = pool.run_many([source])
    return result.outcome, result.detail, result.seconds


def assert_healthy(pool: SandboxPool, marker: str | None = None) -> None:
    """The pool still answers, has exactly its workers' processes, and `marker` is gone."""
    assert run_one(pool, program(""))[0] is Outcome.passed
    workers = len(pool.worker_pids())
    assert workers == pool.workers
    per_worker = 2 if pool.isolation == "bwrap" else 1  # bwrap and the fork server, or the server
    assert len(pool_processes(pool)) == workers * per_worker
    if marker is not None:
        assert wait_until_gone(marker) == []


def test_normal_programs(pool: SandboxPool) -> None:
    assert run_one(pool, program(""))[0] is Outcome.passed
    outcome, detail, _ = run_one(pool, program("", solution=WRONG))
    assert outcome is Outcome.failed
    assert detail.startswith("AssertionError") and "(line" in detail
    outcome, detail, _ = run_one(pool, program("x = 1 / 0"))
    assert (outcome, detail) == (Outcome.failed, "ZeroDivisionError: division by zero (line 4)")
    assert run_one(pool, program("def broken(:\n    pass"))[0] is Outcome.syntax_error
    assert run_one(pool, "x = 1\0")[0] is Outcome.syntax_error
    assert run_one(pool, program("input()"))[0:2] == (Outcome.failed, "EOFError: EOF when reading a line (line 4)")
    assert_healthy(pool)


def test_infinite_loop_times_out(pool: SandboxPool) -> None:
    outcome, detail, seconds = run_one(pool, program("while True:\n    pass"))
    assert outcome is Outcome.timeout, detail
    assert pool.limits.timeout_s <= seconds < pool.limits.timeout_s + 1.0
    assert run_one(pool, program("import time\ntime.sleep(60)"))[0] is Outcome.timeout
    assert_healthy(pool)


def test_fork_bomb(pool: SandboxPool) -> None:
    bomb = """
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
    """
    outcome, detail, _ = run_one(pool, program(bomb, harmful=True))
    if pool.isolation == "bwrap":  # the fork server counts the processes in its namespace
        assert (outcome, detail) == (Outcome.crashed, "more than 64 processes (fork bomb?)")
    else:  # RLIMIT_NPROC makes fork fail, and the bomb loops until its time is up
        assert outcome is Outcome.timeout
    assert_healthy(pool)


def test_a_few_processes_are_fine(pool: SandboxPool) -> None:
    """Under a 10 s limit: starting four worker processes can take over the fixture's 1 s on a loaded machine."""
    pool_user = """
        import multiprocessing, time
        with multiprocessing.Pool(4) as workers:
            assert workers.map(abs, range(-8, 0)) == list(range(8, 0, -1))
            time.sleep(0.15)  # long enough for the fork server to count them
    """
    with open_pool(pool.isolation, limits=replace(pool.limits, timeout_s=10.0)) as roomy:
        outcome, detail, _ = run_one(roomy, program(pool_user))
        assert outcome is Outcome.passed, detail
        assert_healthy(roomy)


def test_memory_bomb(pool: SandboxPool) -> None:
    """Under a 10 s limit: writing 256 MB page by page can take over the fixture's 1 s on a loaded machine,
    and the outcome asked for is the memory limit's, not the clock's."""
    hog = "hog = []\nwhile True:\n    hog.append(bytearray(10**7))"
    with open_pool(pool.isolation, limits=replace(pool.limits, timeout_s=10.0)) as roomy:
        outcome, detail, _ = run_one(roomy, program(hog))
        assert outcome is Outcome.memory, detail
        assert "address-space limit 256 MB" in detail
        assert run_one(roomy, program("x = ' ' * 10**10"))[0] is Outcome.memory
        assert_healthy(roomy)


def test_files_outside_the_work_dir_survive(pool: SandboxPool, tmp_path: Path) -> None:
    canary = tmp_path / "canary.txt"
    canary.write_text("alive")
    stdlib_file = Path(os.__file__)
    before = stdlib_file.stat()
    vandal = f"""
        import os, shutil
        for attempt in (
            lambda: os.remove({str(canary)!r}),
            lambda: open({str(canary)!r}, "w").write("dead"),
            lambda: shutil.rmtree({str(tmp_path)!r}),
            lambda: open({str(tmp_path / "intruder.txt")!r}, "w").write("x"),
            lambda: open({str(stdlib_file)!r}, "a").write("# owned"),
            lambda: os.chmod({str(stdlib_file)!r}, 0o777),
        ):
            try:
                attempt()
            except OSError:
                pass
    """
    assert run_one(pool, program(vandal, harmful=True))[0] is Outcome.passed
    assert canary.read_text() == "alive"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["canary.txt"]
    after = stdlib_file.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_mode) == (before.st_size, before.st_mtime_ns, before.st_mode)
    assert_healthy(pool)


def test_nothing_written_survives_into_the_next_program(pool: SandboxPool) -> None:
    places = ["'leftover.txt'", "os.path.join(os.environ['TMPDIR'], 'leftover')"]
    if pool.isolation == "bwrap":  # without namespaces /tmp and /dev/shm are the host's
        places += ["'/tmp/leftover'", "'/dev/shm/leftover'"]
    writer = "import os\n" + "".join(f"open({place}, 'w').write('x')\n" for place in places)
    reader = "import os\n" + "".join(f"assert not os.path.exists({place}), {place}\n" for place in places)
    with open_pool(pool.isolation, workers=1, limits=pool.limits) as single:
        assert [r.outcome for r in single.run_many([program(writer), program(reader)])] == [Outcome.passed] * 2


def test_killing_the_parent(pool: SandboxPool) -> None:
    # bwrap: the fork server is the namespace's init, immune from inside; rlimits: it runs as root.
    killer = "import os\nos.kill(os.getppid(), 9)"
    assert run_one(pool, program(killer, solution=WRONG))[0] is Outcome.failed
    assert_healthy(pool)


def test_killing_everything_it_can(pool: SandboxPool) -> None:
    assert run_one(pool, program("import os\nos.kill(-1, 9)", solution=WRONG, harmful=True))[0] is Outcome.failed
    assert_healthy(pool)


def test_reading_secrets(pool: SandboxPool) -> None:
    if not os.path.exists("/etc/shadow"):
        pytest.skip("no /etc/shadow here")
    outcome, detail, _ = run_one(pool, program("print(open('/etc/shadow').read())"))
    assert outcome is Outcome.failed
    assert detail.startswith(("PermissionError", "FileNotFoundError")), detail


def test_programs_run_as_nobody(pool: SandboxPool) -> None:
    """nobody in its namespace (bwrap), else its worker's own uid; and not the caller's uid outside."""
    uids = [65534] if pool.isolation == "bwrap" else pool.worker_uids()
    check = f"import os\nassert os.getuid() in {uids} and (os.geteuid(), os.getgid()) == (os.getuid(),) * 2"
    assert run_one(pool, program(check))[0] is Outcome.passed


def test_stopping_the_parent(pool: SandboxPool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool_module, "GRACE_S", 0.5)  # how long the pool waits past timeout_s
    stopper = "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)"
    outcome, detail, _ = run_one(pool, program(stopper, solution=WRONG))
    assert outcome is Outcome.failed  # the fork server is out of its reach: the tests ran, or kill raised EPERM
    assert detail.startswith(("AssertionError", "PermissionError")), detail
    assert_healthy(pool)


EARLY_EXITS = ["import os\nos._exit(0)", "import sys\nsys.exit(0)", "raise SystemExit", "exit()"]


@pytest.mark.parametrize("early_exit", EARLY_EXITS)
def test_exiting_before_the_asserts_is_not_a_pass(pool: SandboxPool, early_exit: str) -> None:
    outcome, detail, _ = run_one(pool, program(early_exit, solution=WRONG))
    assert outcome is Outcome.crashed
    assert "before the tests finished" in detail


def test_forging_the_completion_record(pool: SandboxPool) -> None:
    forger = """
        import os
        for fd in range(3, 20):
            try:
                os.write(fd, b"0" * 32 + b"P" + b"f" * 32 + b"P")
            except OSError:
                pass
        os._exit(0)
    """
    assert run_one(pool, program(forger, solution=WRONG))[0] is Outcome.crashed
    assert_healthy(pool)


def test_killing_itself(pool: SandboxPool) -> None:
    outcome, detail, _ = run_one(pool, program("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)"))
    assert (outcome, detail) == (Outcome.crashed, "killed by SIGSEGV")


def test_flooding_stdout_and_stderr(pool: SandboxPool, capfd: pytest.CaptureFixture[str]) -> None:
    assert run_one(pool, program("while True:\n    print('x' * 10000)"))[0] is Outcome.timeout
    flood = "import sys\nfor _ in range(2000):\n    print('y' * 10000)\n    print('z' * 1000, file=sys.stderr)"
    assert run_one(pool, program(flood))[0] is Outcome.passed
    assert capfd.readouterr() == ("", "")  # nothing reaches the caller's terminal
    assert_healthy(pool)


def test_network_is_unreachable(pool: SandboxPool) -> None:
    if not pool.network_isolated:
        pytest.skip("no network namespace in this mode here")
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.setblocking(False)
        port = server.getsockname()[1]
        caller = f"""
            import socket
            for address in [("127.0.0.1", {port}), ("1.1.1.1", 53)]:
                try:
                    socket.create_connection(address, timeout=0.5)
                except OSError:
                    continue
                raise AssertionError(f"connected to {{address}}")
        """
        outcome, detail, _ = run_one(pool, program(caller))
        assert outcome is Outcome.passed, detail
        with pytest.raises(BlockingIOError):
            server.accept()


def test_replacing_builtins_cannot_fake_a_pass(pool: SandboxPool) -> None:
    saboteur = """
        import builtins, os, sys, __main__
        os.write = lambda *args: 0
        os._exit = lambda *args: None
        sys.settrace = sys.setprofile = None
        __main__.describe = __main__.execute = None
        builtins.SystemExit = builtins.MemoryError = builtins.BaseException = None
        builtins.__dict__.clear()
    """
    outcome, detail, _ = run_one(pool, program(saboteur, solution=WRONG))
    assert outcome is Outcome.failed
    assert detail.startswith("AssertionError")
    assert run_one(pool, program(saboteur))[0] is Outcome.passed  # a right answer still passes
    assert_healthy(pool)


def test_ignoring_sigterm(pool: SandboxPool) -> None:
    marker = f"9{uuid.uuid4().int % 10**8}.5"
    stubborn = f"""
        import signal, subprocess, sys
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        subprocess.Popen([sys.executable, "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep({marker})"])
        while True:
            pass
    """
    assert run_one(pool, program(stubborn))[0] is Outcome.timeout
    assert_healthy(pool, marker)


def test_background_children_are_killed(pool: SandboxPool) -> None:
    marker = f"8{uuid.uuid4().int % 10**8}.5"
    daemons = f"""
        import os, subprocess, threading, time
        subprocess.Popen(["sleep", "{marker}"], start_new_session=True)
        if os.fork() == 0:  # the classic double fork into a new session
            os.setsid()
            if os.fork() == 0:
                os.execvp("sleep", ["sleep", "{marker}"])
            os._exit(0)
        threading.Thread(target=time.sleep, args=(1000,)).start()
        time.sleep(0.2)
    """
    assert run_one(pool, program(daemons))[0] is Outcome.passed
    assert_healthy(pool, marker)


def test_oversized_file(pool: SandboxPool) -> None:
    writer = "with open('big.bin', 'wb') as handle:\n    handle.write(b'0' * (32 * 1024 * 1024))"
    outcome, detail, _ = run_one(pool, program(writer))
    assert outcome is Outcome.failed
    assert "File too large" in detail


def test_signals_from_the_program_do_not_reach_the_caller(pool: SandboxPool) -> None:
    caller = os.getpid()
    received: list[int] = []
    # Another library (Ray, earlier in the same session) may own SIGTERM: watch with our own handler.
    previous = signal.signal(signal.SIGTERM, lambda signum, _frame: received.append(signum))
    try:
        outcome, _, _ = run_one(pool, program(f"import os, signal\nos.kill({caller}, signal.SIGTERM)", harmful=True))
        time.sleep(0.2)  # a delivered signal would have run the handler by now
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert outcome in (Outcome.passed, Outcome.failed)  # no such pid in its namespace, or EPERM
    assert os.getpid() == caller  # and we are still here
    assert received == []
