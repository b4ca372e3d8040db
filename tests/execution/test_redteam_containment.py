"""Red team: a program tries to reach what outlives it (other processes, IPC objects, keys, files, locks).

Each attack runs in a one-worker pool, once per mode ("bwrap", "rlimits"), as a program whose text
asserts that every attempt was refused: it passes only if the attack is contained. The programs
after it on the same worker, a right and a wrong answer, must get the verdicts they get alone.
"""

from __future__ import annotations

import ctypes
import os
import textwrap
from typing import Iterator

import pytest
from redteam_helpers import PRELUDE
from sandbox_helpers import MODES, open_pool, skip_reason

from quench.execution import Outcome, SandboxLimits, SandboxPool
from quench.execution.toolchains import ENV_VAR as TOOLCHAINS_VAR

CHECK = "def check(candidate):\n    assert candidate(2) == 4\n"
RIGHT = "def square(x):\n    return x * x\n"
WRONG = "def square(x):\n    return x + 1\n"
LIMITS = SandboxLimits(timeout_s=3.0, memory_mb=512, timeout_retries=0)
SHM_KEY = 0x51554E43


def program(body: str, solution: str = RIGHT) -> str:
    return f"{solution}\n{PRELUDE}\n{textwrap.dedent(body)}\n{CHECK}\ncheck(square)\n"


@pytest.fixture(scope="module", params=MODES)
def single(request: pytest.FixtureRequest) -> Iterator[SandboxPool]:
    """One worker, so that the programs after an attack run where it ran."""
    reason = skip_reason(request.param)
    if reason is not None:
        pytest.skip(reason)
    with open_pool(request.param, workers=1, limits=LIMITS) as pool:
        yield pool


def assert_contained(pool: SandboxPool, attack: str, after: str = "") -> None:
    """`attack` passes (every attempt refused), then `after` (a probe) passes; a right answer passes, a wrong one fails."""
    programs = [program(attack), program(after), program(""), program("", solution=WRONG)]
    results = pool.run_many(programs)
    assert results[0].outcome is Outcome.passed, results[0].detail
    assert results[1].outcome is Outcome.passed, results[1].detail
    assert [r.outcome for r in results[2:]] == [Outcome.passed, Outcome.failed], [r.detail for r in results]


def test_the_fork_server_is_out_of_reach(single: SandboxPool) -> None:
    attack = """
        server = os.getppid()  # the fork server: the namespace's init ("bwrap") or root ("rlimits")
        refused("open its memory", lambda: open(f"/proc/{server}/mem", "r+b"))
        refused("read its environment", lambda: open(f"/proc/{server}/environ", "rb").read())
        refused("list its fds", lambda: os.listdir(f"/proc/{server}/fd"))
        refused("PTRACE_SEIZE it", lambda: libc.ptrace(0x4206, server, 0, 0))
        refused("PTRACE_ATTACH it", lambda: libc.ptrace(16, server, 0, 0))
        refused("lower its file limit", lambda: resource.prlimit(server, resource.RLIMIT_NOFILE, (4, 4)))
        refused("renice it", lambda: os.setpriority(os.PRIO_PROCESS, server, 19))
        refused("pin it to a CPU", lambda: os.sched_setaffinity(server, {0}))
        refused("stop it", lambda: os.kill(server, signal.SIGSTOP))
    """
    assert_contained(single, attack)


def test_no_ptrace_class_call_reaches_any_other_process(single: SandboxPool) -> None:
    attack = """
        for pid in others():
            refused(f"open /proc/{pid}/mem", lambda: open(f"/proc/{pid}/mem", "rb"))
            refused(f"PTRACE_SEIZE {pid}", lambda: libc.ptrace(0x4206, pid, 0, 0))
            refused(f"prlimit {pid}", lambda: resource.prlimit(pid, resource.RLIMIT_AS, (1 << 26, 1 << 26)))
            refused(f"renice {pid}", lambda: os.setpriority(os.PRIO_PROCESS, pid, 19))
        refused("renice the whole uid", lambda: os.setpriority(os.PRIO_USER, 0, 19))
        buffer = ctypes.create_string_buffer(64)
        iov = (ctypes.c_void_p * 2)(ctypes.addressof(buffer), 64)
        refused("process_vm_readv", lambda: libc.process_vm_readv(1, iov, 1, iov, 1, 0))
        refused("kcmp", lambda: libc.syscall(312, os.getpid(), 1, 0, 0, 0))
        refused("perf_event_open", lambda: libc.syscall(298, ctypes.create_string_buffer(128), 1, -1, -1, 0))
    """
    assert_contained(single, attack)


def test_its_own_limits_and_priority_stay_its_own(single: SandboxPool) -> None:
    """What a program may do to itself still works (glibc's setrlimit is prlimit64 on pid 0)."""
    own = """
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        assert resource.prlimit(0, resource.RLIMIT_NOFILE) == (64, 64)
        os.nice(1)
        os.sched_setaffinity(0, os.sched_getaffinity(0))
    """
    assert_contained(single, own)


def test_sysv_shared_memory_is_refused_and_nothing_stays_resident(single: SandboxPool) -> None:
    attack = f"""
        for _ in range(5):  # 512 MB each, under a 512 MB address-space limit: memory outside the limit
            refused("shmget", lambda: libc.shmget({SHM_KEY}, 512 << 20, 0o1000 | 0o666))
        refused("attach a guessed segment", lambda: libc.shmat(0, None, 0))
        refused("shmctl", lambda: libc.shmctl(0, 2, None))
        refused("semget", lambda: libc.semget({SHM_KEY}, 1, 0o1000 | 0o666))
    """
    probe = f"refused('find the segment', lambda: libc.shmget({SHM_KEY}, 0, 0))"
    before = sysv_keys("shm")
    assert_contained(single, attack, probe)
    assert f"{SHM_KEY}" not in sysv_keys("shm") - before


def test_message_queues_are_refused(single: SandboxPool) -> None:
    attack = f"""
        refused("msgget", lambda: libc.msgget({SHM_KEY}, 0o1000 | 0o666))
        refused("msgsnd to a guessed queue", lambda: libc.msgsnd(0, ctypes.create_string_buffer(16), 8, 0))
        refused("mq_open", lambda: libc.syscall(240, b"quench-spy", os.O_CREAT | os.O_RDWR, 0o666, None))
    """
    probe = f"""
        refused("find the queue", lambda: libc.msgget({SHM_KEY}, 0))
        refused("open the mqueue", lambda: libc.syscall(240, b"quench-spy", os.O_RDWR, 0, None))
    """
    before = sysv_keys("msg")
    assert_contained(single, attack, probe)
    assert f"{SHM_KEY}" not in sysv_keys("msg") - before


def test_keyrings_are_refused(single: SandboxPool) -> None:
    attack = """
        KEY_SPEC_USER_KEYRING, KEY_SPEC_SESSION_KEYRING = -4, -3
        refused("add_key", lambda: libc.syscall(248, b"user", b"quench-spy", b"secret", 6, KEY_SPEC_USER_KEYRING))
        refused("request_key", lambda: libc.syscall(249, b"user", b"quench-spy", None, KEY_SPEC_SESSION_KEYRING))
        refused("keyctl(JOIN_SESSION_KEYRING)", lambda: libc.syscall(250, 1, b"quench-spy"))
        refused("keyctl(GET_KEYRING_ID)", lambda: libc.syscall(250, 0, KEY_SPEC_USER_KEYRING, 0))
    """
    assert_contained(single, attack)


def test_the_filter_and_the_domain_hold_through_exec(single: SandboxPool) -> None:
    """What a program execs (a compiler's output, a JVM, a Go binary) is held as the program is."""
    attack = f"""
        import subprocess
        child = (
            "import ctypes, os, sys\\n"
            "libc = ctypes.CDLL(None, use_errno=True)\\n"
            "assert libc.shmget({SHM_KEY}, 1 << 20, 0o1000 | 0o666) == -1, 'shmget'\\n"
            "assert libc.msgget({SHM_KEY}, 0o1000 | 0o666) == -1, 'msgget'\\n"
            "assert libc.ptrace(0x4206, os.getppid(), 0, 0) == -1, 'ptrace'\\n"
            "try:\\n    open('/proc/1/mem', 'rb')\\nexcept OSError:\\n    pass\\nelse:\\n    sys.exit('mem')\\n"
        )
        done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-300:]
    """
    assert_contained(single, attack)


def test_a_daemon_cannot_wait_for_the_next_program(single: SandboxPool) -> None:
    """setsid and a double fork: the daemon would write into the next program's directory and hold a socket."""
    attack = """
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                spy = socket.socket(socket.AF_UNIX)
                spy.bind("\\0quench-spy")
                spy.listen()
                time.sleep(0.5)
                for target in ("planted.txt", "/tmp/planted.txt"):
                    try:
                        open(target, "w").write("x")
                    except OSError:
                        pass
                time.sleep(60)
            os._exit(0)
        time.sleep(0.1)
    """
    probe = """
        time.sleep(1.0)
        assert not os.path.exists("planted.txt") and not os.path.exists("/tmp/planted.txt")
        refused("reach the daemon's socket", lambda: socket.socket(socket.AF_UNIX).connect("\\0quench-spy"))
    """
    assert_contained(single, attack, probe)


def test_stopping_every_process_it_can_see(single: SandboxPool) -> None:
    attack = """
        for pid in others():
            try:
                os.kill(pid, signal.SIGSTOP)
            except OSError:
                pass
        try:
            os.kill(-1, signal.SIGSTOP)
        except OSError:
            pass
    """
    programs = [program(attack), program(""), program("", solution=WRONG)]
    outcomes = [result.outcome for result in single.run_many(programs)]
    assert outcomes[1:] == [Outcome.passed, Outcome.failed]  # the attack itself may stop with the rest


def test_no_descriptor_is_inherited(single: SandboxPool) -> None:
    probe = """
        listed = os.listdir("/proc/self/fd")  # the listing's own descriptor is closed by now
        fds = sorted(int(fd) for fd in listed if os.path.exists(f"/proc/self/fd/{fd}"))
        assert fds == [0, 1, 2, 3], fds  # stdin, the output pipe, the completion record's pipe
    """
    assert_contained(single, probe)


def test_shared_files_cannot_be_changed_or_locked_for_the_next_program(single: SandboxPool) -> None:
    """The interpreter, the toolchains' cache and /proc/self/exe are read-only; a lock dies with its program."""
    attack = f"""
        import fcntl
        directory = os.environ.get({TOOLCHAINS_VAR!r}, "/nonexistent")
        for target in (os.__file__, sys.executable, "/proc/self/exe", os.path.join(directory, "planted.so")):
            refused(f"write {{target}}", lambda: open(target, "ab"))
        refused("/etc/ld.so.preload", lambda: open("/etc/ld.so.preload", "w"))
        held = open(os.__file__, "rb")
        fcntl.flock(held, fcntl.LOCK_EX)
        if os.fork() == 0:  # a child holds the lock on after the program ends
            os.setsid()
            time.sleep(60)
        time.sleep(0.1)
    """
    probe = """
        import fcntl
        with open(os.__file__, "rb") as mine:
            fcntl.flock(mine, fcntl.LOCK_EX | fcntl.LOCK_NB)
    """
    assert_contained(single, attack, probe)


def test_start_up_files_in_home_do_not_reach_the_next_program(single: SandboxPool) -> None:
    """LD_PRELOAD, sitecustomize and dotfiles planted where a later program might read them."""
    attack = """
        home = os.environ["HOME"]
        for name in ("sitecustomize.py", "usercustomize.py", ".bashrc", ".profile", "evil.so"):
            open(os.path.join(home, name), "w").write("import os; os._exit(0)\\n")
        os.environ["LD_PRELOAD"] = os.path.join(home, "evil.so")
        os.putenv("LD_PRELOAD", os.path.join(home, "evil.so"))
    """
    probe = """
        home = os.environ["HOME"]
        assert os.listdir(home) == [], os.listdir(home)
        assert "LD_PRELOAD" not in os.environ
        assert "sitecustomize" not in sys.modules or not sys.modules["sitecustomize"].__file__.startswith(home)
    """
    assert_contained(single, attack, probe)


def test_a_huge_file_in_shared_memory(single: SandboxPool) -> None:
    attack = """
        shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else os.getcwd()
        def fill():
            with open(os.path.join(shm, "huge"), "wb") as handle:
                for _ in range(64):
                    handle.write(b"x" * (1 << 20))
        refused("a 64 MB file", fill)
    """
    probe = """
        assert not os.path.exists("/dev/shm/huge") or os.stat("/dev/shm/huge").st_uid != os.getuid()
        assert not os.path.exists("huge")
    """
    assert_contained(single, attack, probe)


def test_memfd_is_bounded_by_the_file_size_limit(single: SandboxPool) -> None:
    attack = """
        fd = os.memfd_create("hoard")
        def fill():
            for _ in range(64):
                os.write(fd, b"x" * (1 << 20))
        refused("64 MB in a memfd", fill)
    """
    assert_contained(single, attack)


def test_a_core_dump_leaves_nothing(single: SandboxPool) -> None:
    crash = program("import os\nos.abort()")
    results = single.run_many([crash, program("assert not os.listdir('.'), os.listdir('.')"), program("")])
    assert results[0].outcome is Outcome.crashed
    assert [r.outcome for r in results[1:]] == [Outcome.passed, Outcome.passed], [r.detail for r in results]


def test_a_fork_bomb_leaves_the_next_program_its_verdict(single: SandboxPool) -> None:
    bomb = """
        while True:
            try:
                os.fork()
            except OSError:
                pass
    """
    results = single.run_many([program(bomb, solution=WRONG), program(""), program("", solution=WRONG)])
    assert results[0].outcome is not Outcome.passed
    assert [r.outcome for r in results[1:]] == [Outcome.passed, Outcome.failed], [r.detail for r in results]


def test_timers_and_watches_end_with_the_program(single: SandboxPool) -> None:
    """A timerfd, an interval timer and an inotify watch on the scratch directory, kept alive in a daemon."""
    attack = """
        timer = libc.timerfd_create(1, 0)
        assert timer >= 0
        watch = libc.inotify_init()
        assert watch >= 0 and libc.inotify_add_watch(watch, os.getcwd().encode(), 0xFFF) >= 0
        if os.fork() == 0:  # keeps both open
            os.setsid()
            time.sleep(60)
        time.sleep(0.1)
    """
    probe = "time.sleep(1.0)"
    assert_contained(single, attack, probe)


def sysv_keys(kind: str) -> set[str]:
    """Keys (decimal) of the SysV objects of this (the caller's) IPC namespace."""
    try:
        with open(f"/proc/sysvipc/{kind}", encoding="ascii") as handle:
            return {line.split()[0] for line in handle.readlines()[1:]}
    except OSError:
        return set()


def test_the_prelude_is_real() -> None:
    """The attacks' `refused` tells an allowed call from a refused one (so that an attack test can fail)."""
    namespace: dict[str, object] = {}
    exec(PRELUDE, namespace)  # noqa: S102 - the test's own text
    refused = namespace["refused"]
    with pytest.raises(AssertionError):
        refused("getpid", os.getpid)  # type: ignore[operator]
    refused("a failing call", lambda: ctypes.CDLL(None).shmdt(None))  # type: ignore[operator]
