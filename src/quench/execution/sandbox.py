"""Sandbox limits, the choice of isolation, and the command that starts one fork-server worker.

Isolation modes (`Isolation`):
- "bwrap": bubblewrap gives each worker its own user (nobody), pid, network, ipc and mount
  namespaces, read-only system directories, the interpreter's own directories (its prefix and
  venv, never the rest of a checkout or home that holds them) and the toolchains' cache, and
  tmpfs scratch space that the fork server wipes after every program. The fork server is the pid
  namespace's init, so programs cannot signal it, and everything left in the namespace is killed
  after each program. Run as root, quench starts bubblewrap as the worker's own unprivileged uid
  (uids.py; launch.py stages what it binds), so nobody inside is that uid outside, never root.
- "rlimits": no namespaces (bubblewrap cannot run here); the fork server runs as root and drops
  every program to its worker's own uid, one no other process on the machine uses, so a program
  can signal only its own processes; Landlock (landlock.py) lets it change files only in its
  scratch directory (and a private /dev/shm where root may mount one); it reads what any user may.
  It needs root, a kernel with Landlock, and an interpreter whose directories others can read.
- "unconfined": neither is possible, and the caller said so explicitly (`allow_unconfined`, the
  CLI's `--unsafe-unconfined`): programs run as the calling user and can read, change and delete
  its files and signal its processes. Without that opt-in quench refuses to run programs.
All modes keep rlimits and the per-program process group inside the worker (see forkserver.py).
In both confined modes every program runs in a Landlock domain of its own, which the kernel lets
reach (ptrace, /proc/<pid>/mem, signals, abstract sockets) no process outside it: not the fork
server, not a warm host, not a later program; and under a seccomp filter (seccomp.py) that refuses
the rest of that class (another process's limits, priority or scheduling) and every kernel
object that would outlive it (SysV shared memory, semaphores and queues, POSIX queues, keys).
What it leaves in its scratch space is removed without recursion (cleanup.py); a worker that
cannot be cleaned is replaced. docs/sandbox.md says what holds and which tests show it.
"""

from __future__ import annotations

import ast
import functools
import json
import logging
import os
import shutil
import stat
import subprocess
import sys
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from quench.datasets.languages import HOST_MARK
from quench.errors import QuenchError
from quench.execution.toolchains import ENV_VAR as TOOLCHAINS_VAR
from quench.execution.landlock import landlock_abi
from quench.execution.launch import staged
from quench.execution.toolchains import host_command, node_host_script, sandbox_binds, toolchain_dir
from quench.execution.uids import allocate

log = logging.getLogger(__name__)

Isolation = Literal["bwrap", "rlimits", "unconfined"]
HOST_VAR = "QUENCH_NODE_HOST"
REQUESTS = ("auto", "bwrap", "rlimits")
NOBODY = 65534
SCRIPT_PARTS = ("landlock.py", "seccomp.py", "cleanup.py", "node_host.py", "program.py", "forkserver.py")  # run as one script, in this order
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_FILES = ("/etc/ld.so.cache", "/etc/passwd", "/etc/group", "/etc/localtime", "/etc/alternatives")
THREADS_PER_PROCESS = 16  # "bwrap" mode's RLIMIT_NPROC per allowed process (it counts threads)
SCRATCH = "/tmp"  # "bwrap" mode: a tmpfs here, wiped after every program
WORKER_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "HOME": "/tmp",
    "PYTHONHASHSEED": "0",  # same set/dict order in every worker: verdicts must not depend on the worker
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONIOENCODING": "utf-8",
    "OMP_NUM_THREADS": "1",  # numerical libraries must not spawn a thread per core in every program
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    TOOLCHAINS_VAR: toolchain_dir(),  # other languages' shared read-only build cache (toolchains.py)
}
FIX_HINT = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap), or run quench from a Python environment "
    "that the nobody user can read (e.g. a venv under /opt or /srv, not under /root), or pass --unsafe-unconfined "
    "(allow_unconfined=True in the library) to run them anyway"
)


@dataclass(frozen=True)
class SandboxLimits:
    """Per-program limits; every program runs in its own process under all of them."""

    # Wall clock; the whole process group is killed when it runs out. The default is `--timeout`'s (T_base,
    # evalplus' floor): a program a busy machine slows a few seconds is not a timeout.
    timeout_s: float = 10.0
    memory_mb: int = 2048  # RLIMIT_AS (address space) of the program's processes
    file_size_mb: int = 16  # RLIMIT_FSIZE: largest file a program may write
    # Per program. RLIMIT_NPROC (x workers: it counts the uid's processes and threads) binds
    # neither root nor a user namespace mapped to root (bwrap run as root), so in "bwrap" mode
    # the fork server also counts the processes in its namespace.
    max_processes: int = 64
    output_bytes: int = 2048  # tail of stdout+stderr kept for a crash's detail; the rest is discarded
    scratch_mb: int = 256  # size of the tmpfs scratch space in "bwrap" mode
    # A program that times out is run once more with the same limit before it is called a timeout:
    # a busy machine must not turn a pass into a timeout (its result then says flaky_timeout). One that had the
    # CPU for nearly all of its limit while no task waited for one is not (outcomes.ran_unhindered).
    timeout_retries: int = 1

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {self.timeout_s}")
        if self.timeout_retries not in (0, 1):
            raise ValueError(f"timeout_retries must be 0 or 1, got {self.timeout_retries}")
        for name in ("memory_mb", "file_size_mb", "max_processes", "output_bytes", "scratch_mb"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")

    @property
    def cpu_seconds(self) -> int:
        """RLIMIT_CPU: 1-2 s above the wall limit, so the wall clock normally decides."""
        return int(self.timeout_s) + 2


def choose_isolation(requested: str = "auto", *, allow_unconfined: bool = False, python: str | None = None) -> Isolation:
    """The strongest isolation available here for programs run by `python`; refuse to run them unconfined.

    "auto": bwrap if bubblewrap passes its self-test, else rlimits if programs can drop to a uid of their own.
    Raises QuenchError, saying why and how to fix it, when neither works and `allow_unconfined` is off.
    """
    if requested not in REQUESTS:
        raise QuenchError(f"unknown isolation {requested!r}: expected {', '.join(REQUESTS)}")
    python = python or python_executable()
    bwrap_problem = None
    if requested != "rlimits":
        bwrap_problem = bwrap_problem_for(python)
        if bwrap_problem is None:
            return "bwrap"
        if requested == "bwrap":
            raise QuenchError(f"isolation bwrap: {bwrap_problem}")
    drop_problem = drop_problem_for(python)
    if drop_problem is None:
        if bwrap_problem is not None:
            log.warning("%s: programs run as a uid of their own under rlimits and Landlock, without namespaces", bwrap_problem)
        return "rlimits"
    reasons = f"{bwrap_problem}, and {drop_problem}" if bwrap_problem else drop_problem
    if not allow_unconfined:
        raise QuenchError(f"cannot confine the programs to run: {reasons}; unconfined, they could read, change and "
                          f"delete your files and kill your processes. To fix it: {FIX_HINT}")
    log.warning("UNCONFINED SANDBOX (opted in): %s; programs run as uid %d and can read, change and delete its "
                "files", reasons, os.geteuid())
    return "unconfined"


def bwrap_works(python: str | None = None) -> bool:
    """Whether bubblewrap confines programs run by `python` here (its self-test passes)."""
    return bwrap_problem_for(python or python_executable()) is None


def bwrap_problem_for(python: str) -> str | None:
    """Why bubblewrap cannot confine programs run by `python` here, or None when it can."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed"
    return _bwrap_self_test(bwrap, python)


@functools.lru_cache(maxsize=8)
def _bwrap_self_test(bwrap: str, python: str) -> str | None:
    """Start `python` under bwrap as nobody with no network, as a worker uid where root (cached per process)."""
    check = (
        "import os, socket\n"
        f"assert os.getuid() == {NOBODY}\n"

        "try:\n    socket.create_connection(('10.255.255.1', 9), timeout=0.5)\n"
        "except OSError:\n    pass\nelse:\n    raise SystemExit('network reachable')\n"
    )
    held = allocate(1)
    try:
        uid = held[0].uid if held else None
        command = sandboxed([python, "-s", "-P", "-c", check], SandboxLimits(), python, uid)
        done = subprocess.run(command, env=WORKER_ENV, capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired, QuenchError) as err:
        return f"bubblewrap's self-test did not run ({err})"
    finally:
        for worker_uid in held:
            worker_uid.release()
    if done.returncode == 0:
        return None
    tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
    return f"bubblewrap's self-test failed ({tail[0][:200]})"


def drop_problem_for(python: str) -> str | None:
    """Why programs run by `python` cannot drop to a uid of their own here, or None when they can."""
    if os.geteuid() != 0:
        return f"quench runs as uid {os.geteuid()}, which cannot switch programs to another user"
    if landlock_abi() < 1:
        return "the kernel has no Landlock (Linux 5.13+), which keeps programs from writing outside their directory"
    for path in python_dirs(python):
        blocked = _hidden_from_others(path)
        if blocked is not None:
            return f"other users cannot read the Python environment ({blocked} is not readable by others)"
    return None


def python_executable() -> str:
    if not sys.executable:
        raise QuenchError("cannot find the Python interpreter to run sandboxed programs with")
    return sys.executable


@functools.lru_cache(maxsize=8)
def _prefixes(python: str) -> tuple[str, ...]:
    """`python`'s sys.prefix (its venv) and sys.base_prefix (its stdlib)."""
    if python == sys.executable:
        return (sys.prefix, sys.base_prefix)
    script = "import sys; print(sys.prefix); print(sys.base_prefix)"
    try:
        done = subprocess.run([python, "-s", "-P", "-c", script], capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError) as err:
        raise QuenchError(f"{python}: cannot run this Python interpreter ({err})") from None
    return tuple(done.stdout.split())


def python_dirs(python: str | None = None) -> list[str]:
    """Directories the sandboxed interpreter needs: its prefix (stdlib), the venv (site-packages)."""
    python = python or python_executable()
    candidates = {*_prefixes(python), os.path.dirname(os.path.realpath(python)), os.path.dirname(os.path.abspath(python))}
    kept: list[str] = []
    for path in sorted(os.path.realpath(p) for p in candidates):
        if not any(path == parent or path.startswith(parent + "/") for parent in (*SYSTEM_DIRS, *kept)):
            kept.append(path)
    return kept


def scratch_binds(python: str) -> list[str]:
    """Top-level entries of SCRATCH that hold the interpreter: mount points the fork server leaves alone.

    An entry that is not itself one of the interpreter's directories becomes a small read-only
    tmpfs holding only those: programs can neither rename nor lock the way to the interpreter,
    nor see what else the host keeps there (the rest of a clone that holds the venv).
    """
    inside = [path[len(SCRATCH) + 1 :] for path in python_dirs(python) if path.startswith(SCRATCH + "/")]
    return sorted({f"{SCRATCH}/{relative.split('/')[0]}" for relative in inside})


def bind_sources(python: str) -> tuple[list[str], list[str]]:
    """What bwrap binds from outside the system directories: the interpreter's dirs, and the toolchains' that exist."""
    return python_dirs(python), [path for path in sandbox_binds() if os.path.exists(path)]


def bwrap_args(limits: SandboxLimits, python: str, bwrap: str = "bwrap", staged: dict[str, str] | None = None) -> list[str]:
    """bwrap options: nobody, new namespaces, read-only system and Python dirs, tmpfs scratch.

    `staged` maps a source to where bwrap finds it (launch.py's staging, when root starts it as a worker uid).
    """
    where = (staged or {}).get
    args = [bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--uid", str(NOBODY), "--gid", str(NOBODY)]
    # --as-pid-1: the fork server is the namespace's init, so a program cannot kill or stop it
    # (init ignores signals from inside its namespace), orphans come to it, and bwrap leaves no
    # zombie behind (without it, bwrap's own init is left for the host's pid 1 to reap).
    args += ["--die-with-parent", "--new-session", "--as-pid-1"]
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in ETC_FILES:
        args += ["--ro-bind-try", path, path]
    scratch = str(limits.scratch_mb * 1024 * 1024)
    args += ["--size", scratch, "--tmpfs", SCRATCH, "--proc", "/proc", "--dev", "/dev"]
    python_sources, toolchain_sources = bind_sources(python)
    # After the scratch tmpfs, so that an interpreter under /tmp (a clone there) is not hidden by it.
    entries = [entry for entry in scratch_binds(python) if entry not in python_sources]
    for entry in entries:
        args += ["--size", str(1024 * 1024), "--tmpfs", entry]
    for path in python_sources:
        args += ["--ro-bind", where(path, path), path]
    for entry in entries:
        args += ["--remount-ro", entry]
    for path in toolchain_sources:  # other languages' build cache and configuration
        args += ["--ro-bind", where(path, path), path]
    args += ["--size", scratch, "--tmpfs", "/dev/shm", "--remount-ro", "/dev", "--remount-ro", "/"]
    return args + ["--chdir", SCRATCH]


def sandboxed(command: list[str], limits: SandboxLimits, python: str, uid: int | None) -> list[str]:
    """`command` under bwrap; as `uid` outside (launch.py stages what bwrap binds), or as the caller where None."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise QuenchError("bubblewrap (bwrap) is no longer installed")
    bwrap = os.path.realpath(bwrap)  # the launcher's staging may hide where a link to it lives (e.g. under /tmp)
    if uid is None:
        return bwrap_args(limits, python, bwrap) + command
    sources = [path for group in bind_sources(python) for path in group]
    argv = bwrap_args(limits, python, bwrap, {source: staged(index) for index, source in enumerate(sources)}) + command
    config = {"uid": uid, "stage": sources, "argv": argv}
    return [python_executable(), "-I", "-S", "-c", launcher_script(), json.dumps(config)]


@functools.cache
def launcher_script() -> str:
    return Path(__file__).with_name("launch.py").read_text(encoding="utf-8")


def _hidden_from_others(path: str) -> str | None:
    """The first directory on the way to `path` that a user with no ownership cannot pass, or None."""
    current = Path(path)
    for directory in reversed((current, *current.parents)):
        if not directory.stat().st_mode & stat.S_IXOTH:
            return str(directory)
    return None if current.stat().st_mode & stat.S_IROTH else str(current)


def host_spec() -> dict[str, object] | None:
    """The fork server's JavaScript host, where the build cache holds one (toolchains.prepare_node_host).

    QUENCH_NODE_HOST=0 turns it off: each program starts node (from the start-up snapshot).
    """
    if os.environ.get(HOST_VAR) == "0":
        return None
    script = node_host_script()
    if not script.is_file():
        return None
    argv, env = host_command(script)
    return {"mark": HOST_MARK, "argv": argv, "env": env}


_SCRIPT_LOCK = threading.Lock()


def fork_server_script() -> str:
    """The fork server as one stdlib-only script: SCRIPT_PARTS in order, each without its quench imports. Built
    once, under a lock: pools started from several threads at once would otherwise parse it side by side, and
    CPython 3.11's AST constructor keeps its recursion depth where two threads' parses can mix it up (SystemError:
    "AST constructor recursion depth mismatch", CPython gh-106905)."""
    with _SCRIPT_LOCK:
        return _fork_server_script()


@functools.cache
def _fork_server_script() -> str:
    return "\n".join(without_quench_imports(Path(__file__).with_name(name).read_text(encoding="utf-8"))
                     for name in SCRIPT_PARTS)


def without_quench_imports(source: str) -> str:
    """`source` with its `from quench... import ...` statements removed (what they import comes earlier)."""
    lines = source.splitlines()
    for node in ast.parse(source).body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "quench":
            lines[node.lineno - 1:node.end_lineno] = [""] * (node.end_lineno - node.lineno + 1)
    return "\n".join(lines) + "\n"


def worker_command(isolation: Isolation, limits: SandboxLimits, workers: int = 1, python: str | None = None,
                   uid: int | None = None) -> list[str]:
    """The command that starts one fork-server worker; its config travels as a JSON argument.

    `uid`: the worker's own uid (uids.allocate) where quench runs as root; "rlimits" mode needs one.
    """
    python = python or python_executable()
    if isolation == "rlimits" and uid is None:
        raise QuenchError("isolation rlimits: programs need a uid of their own, and only root can switch to one")
    config = {
        **asdict(limits),
        "cpu_seconds": limits.cpu_seconds,
        # RLIMIT_NPROC counts every process and thread of the uid. In "bwrap" mode the fork server
        # counts the namespace's processes, so it is only a backstop there, far above what a JVM's or
        # node's threads take; in "rlimits" mode it is the limit itself.
        "nproc": limits.max_processes * (THREADS_PER_PROCESS if isolation == "bwrap" else workers),
        "mode": "bwrap" if isolation == "bwrap" else "rlimits",
        "run_uid": uid if isolation == "rlimits" else None,
        "keep": scratch_binds(python) if isolation == "bwrap" else [],
        "node_host": host_spec() if isolation == "bwrap" else None,
    }
    command = [python, "-s", "-P", "-c", fork_server_script(), json.dumps(config)]
    return sandboxed(command, limits, python, uid) if isolation == "bwrap" else command
