"""Sandbox limits and the command that starts one sandboxed fork-server worker.

Two isolation modes (`Isolation`):
- "bwrap": bubblewrap gives each worker its own user (nobody), pid, network, ipc and mount
  namespaces, read-only system and Python directories, and tmpfs scratch space that the fork
  server wipes after every program. The fork server is the pid namespace's init, so programs
  cannot signal it, and everything left in the namespace is killed after each program.
- "rlimits": no namespaces; the fork server sets rlimits, a new session and a fresh directory per
  program, and drops to `nobody` when it runs as root and the interpreter is readable by others.
  Without that drop (e.g. Python under /root) programs run as root: it is not a sandbox then.
Both modes keep rlimits and the per-program process group inside the worker (see forkserver.py).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from quench.errors import QuenchError

log = logging.getLogger(__name__)

Isolation = Literal["bwrap", "rlimits"]
NOBODY = 65534
FORKSERVER_SOURCE = Path(__file__).with_name("forkserver.py")
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_FILES = ("/etc/ld.so.cache", "/etc/passwd", "/etc/group", "/etc/localtime", "/etc/alternatives")
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
}


@dataclass(frozen=True)
class SandboxLimits:
    """Per-program limits; every program runs in its own process under all of them."""

    timeout_s: float = 3.0  # wall clock; the whole process group is killed when it runs out
    memory_mb: int = 2048  # RLIMIT_AS (address space) of the program's processes
    file_size_mb: int = 16  # RLIMIT_FSIZE: largest file a program may write
    # Per program. RLIMIT_NPROC (x workers: it counts the uid's processes and threads) binds
    # neither root nor a user namespace mapped to root (bwrap run as root), so in "bwrap" mode
    # the fork server also counts the processes in its namespace.
    max_processes: int = 64
    output_bytes: int = 2048  # tail of stdout+stderr kept for a crash's detail; the rest is discarded
    scratch_mb: int = 256  # size of the tmpfs scratch space in "bwrap" mode

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {self.timeout_s}")
        for name in ("memory_mb", "file_size_mb", "max_processes", "output_bytes", "scratch_mb"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")

    @property
    def cpu_seconds(self) -> int:
        """RLIMIT_CPU: 1-2 s above the wall limit, so the wall clock normally decides."""
        return int(self.timeout_s) + 2


def choose_isolation(requested: str = "auto") -> Isolation:
    """Resolve "auto" to "bwrap" when bubblewrap passes its self-test here, else "rlimits"."""
    if requested == "rlimits":
        return "rlimits"
    if requested not in ("auto", "bwrap"):
        raise QuenchError(f"unknown isolation {requested!r}: expected auto, bwrap or rlimits")
    if bwrap_works():
        return "bwrap"
    if requested == "bwrap":
        raise QuenchError("bubblewrap (bwrap) is not installed or cannot create namespaces here")
    log.warning("bubblewrap unavailable: programs run with rlimits only (no namespaces)")
    return "rlimits"


@functools.lru_cache(maxsize=1)
def bwrap_works() -> bool:
    """Self-test: bwrap starts our Python as nobody with no network (cached per process)."""
    if shutil.which("bwrap") is None:
        return False
    check = (
        "import os, socket\n"
        f"assert os.getuid() == {NOBODY}\n"
        "try:\n    socket.create_connection(('10.255.255.1', 9), timeout=0.5)\n"
        "except OSError:\n    pass\nelse:\n    raise SystemExit('network reachable')\n"
    )
    command = bwrap_args(SandboxLimits()) + [python_executable(), "-s", "-P", "-c", check]
    try:
        done = subprocess.run(command, env=WORKER_ENV, capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        log.info("bwrap self-test failed to run: %s", err)
        return False
    if done.returncode != 0:
        log.info("bwrap self-test failed (%d): %s", done.returncode, done.stderr.decode(errors="replace")[-500:])
    return done.returncode == 0


def python_executable() -> str:
    if not sys.executable:
        raise QuenchError("cannot find the Python interpreter to run sandboxed programs with")
    return sys.executable


def python_dirs() -> list[str]:
    """Directories the sandboxed interpreter needs: its prefix (stdlib), the venv (site-packages)."""
    executable = python_executable()
    candidates = {sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(executable))}
    candidates.add(os.path.dirname(os.path.abspath(executable)))
    kept: list[str] = []
    for path in sorted(os.path.realpath(p) for p in candidates):
        inside = [parent for parent in (*SYSTEM_DIRS, *kept) if path == parent or path.startswith(parent + "/")]
        if not inside:
            kept.append(path)
    return kept


def bwrap_args(limits: SandboxLimits) -> list[str]:
    """bwrap options: nobody, new namespaces, read-only system and Python dirs, tmpfs scratch."""
    args = ["bwrap", "--unshare-all", "--unshare-user", "--disable-userns", "--uid", str(NOBODY), "--gid", str(NOBODY)]
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
    for path in python_dirs():
        args += ["--ro-bind", path, path]
    scratch = str(limits.scratch_mb * 1024 * 1024)
    args += ["--size", scratch, "--tmpfs", "/tmp", "--proc", "/proc", "--dev", "/dev"]
    args += ["--size", scratch, "--tmpfs", "/dev/shm", "--remount-ro", "/dev", "--remount-ro", "/"]
    return args + ["--chdir", "/tmp"]


@functools.lru_cache(maxsize=2)
def run_uid(isolation: Isolation) -> int | None:
    """The uid programs run as in "rlimits" mode: nobody when we are root and it can run Python."""
    if isolation != "rlimits" or os.geteuid() != 0:
        return None
    if all(_others_can_read(path) for path in python_dirs()):
        return NOBODY
    log.warning("the Python interpreter is not readable by nobody: sandboxed programs run as root")
    return None


def _others_can_read(path: str) -> bool:
    """Whether a user with no ownership can traverse every directory down to `path`."""
    current = Path(path)
    for directory in (current, *current.parents):
        mode = directory.stat().st_mode
        if not mode & stat.S_IXOTH:
            return False
    return bool(current.stat().st_mode & stat.S_IROTH)


def worker_command(isolation: Isolation, limits: SandboxLimits, workers: int = 1) -> list[str]:
    """The command that starts one fork-server worker; its config travels as a JSON argument."""
    config = {
        **asdict(limits),
        "cpu_seconds": limits.cpu_seconds,
        # RLIMIT_NPROC counts every process and thread of the uid, and all workers share one.
        "nproc": limits.max_processes * workers,
        "mode": isolation,
        "run_uid": run_uid(isolation),
    }
    python = [python_executable(), "-s", "-P", "-c", FORKSERVER_SOURCE.read_text(encoding="utf-8"), json.dumps(config)]
    return (bwrap_args(limits) + python) if isolation == "bwrap" else python
