"""Fork server: runs inside the sandbox and forks one child per program (stdlib only).

The pool starts it as `python -s -P -c <script> <config json>`, the script being landlock.py's,
seccomp.py's, cleanup.py's, node_host.py's and program.py's text (what each child runs), then this
file's, without their imports of each other (sandbox.fork_server_script); so it imports nothing of
quench and nothing heavy: forking it costs about a millisecond, where starting Python costs ~30.
Frames on stdin/stdout: a 4-byte big-endian length, then UTF-8 JSON.

Per program: a fresh working directory, a new session (process group), rlimits, and in the
"rlimits" mode Landlock's rules (landlock.py) and a drop to the worker's uid; at the end the group is
killed, every descendant that escaped the group is found (the server is a child subreaper, and in
"bwrap" mode the pid namespace's init) and killed, and scratch files are wiped, so nothing a program leaves behind
reaches the next one. Programs are compiled here, before the fork, and forked children touch as
little memory as they can: copy-on-write faults are most of the cost of a run.

JavaScript host: where the config names one ("node_host"), a program whose text starts with its
mark (a JavaScript launcher, quench.datasets.languages) gets the pipes of a warm node
(node_host.py) as fds 4 and 5, and asks it to run its main.js in a fresh V8 context. The host is
spared when a program's processes are killed, so node starts once per worker; after such a
program the server kills the program's processes, then waits until the host has answered every
request (it stops the host if it does not), so nothing of one program outlives it.

Completion sentinel: after the program returns, the child writes a record to a private pipe
that starts with a random per-run nonce. The nonce never appears in the program's text, argv,
environment or output, so an early `sys.exit(0)` / `os._exit(0)` cannot pass for success; only
code that deliberately searches its own process memory could forge it.
"""

import ctypes
import gc
import json
import os
import resource
import select
import signal
import struct
import sys
import time

from quench.execution.landlock import restrict_to, writable_only_beneath  # the script: landlock.py's text first
from quench.execution.seccomp import install, prepare, program_filter  # then seccomp.py's,
from quench.execution.cleanup import (  # cleanup.py's and node_host.py's
    HOST_SYNC_S, force_remove, kill_group, kill_namespace, leftovers, reap_descendants,
)
from quench.execution.node_host import SANDBOX_EXIT, NodeHost, write_line
from quench.execution.program import (  # and program.py's: what runs in each program's process
    DETAIL_CHARS, RESULT_FD, child_rlimits, compile_program, execute, setup_child,
)

WATCH_INTERVAL_S = 0.05  # how often the process count is checked while a program runs
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 4, 36, 38
CLONE_NEWNET, CLONE_NEWNS = 0x40000000, 0x00020000
MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = 2, 4, 16384, 1 << 18
SHM = "/dev/shm"
# Imported once here so that children do not pay for them (importing typing alone is a large share of a short program's time).
PRELOAD = (
    "typing", "math", "re", "collections", "itertools", "functools", "heapq", "bisect", "string",
    "operator", "copy", "hashlib", "random", "fractions", "decimal", "statistics", "datetime",
    "shutil",  # every launcher of another language imports it
)
_libc = ctypes.CDLL(None, use_errno=True)


def read_exact(fd, size):
    data = bytearray()
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def read_frame(fd):
    header = read_exact(fd, 4)
    if header is None:
        return None
    body = read_exact(fd, struct.unpack(">I", header)[0])
    return None if body is None else json.loads(body)


def write_frame(fd, message):
    data = json.dumps(message).encode()
    view = memoryview(struct.pack(">I", len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


class ForkServer:
    def __init__(self, config, null_fd):
        self.config = {**config, "rlimits": child_rlimits(config)}
        self.null_fd = null_fd
        self.pid = os.getpid()
        self.in_namespace = config["mode"] == "bwrap"
        self.base = "/tmp" if self.in_namespace else f"/tmp/quench-sandbox-{self.pid}-{os.urandom(4).hex()}"
        self.config["ruleset"] = None
        filter_bytes = program_filter()
        if filter_bytes is None:
            raise OSError("no seccomp filter for this architecture: programs could reach other processes")
        self.config["seccomp"] = prepare(filter_bytes)
        self.private_shm = config.get("private_shm", False)
        if not self.in_namespace:
            os.mkdir(self.base, 0o711)
            if self.private_shm:  # our own mount namespace: the scratch is a tmpfs of its own, seen only here
                mount_tmpfs(self.base, f"mode=0711,size={config['scratch_mb']}m")
        if self.in_namespace:
            # Writable only where it already is; what matters is the Landlock domain itself: the kernel
            # refuses every ptrace-class access (/proc/<pid>/mem included) and signal to a process
            # outside it, the JavaScript host's and the fork server's.
            self.config["ruleset"] = writable_only_beneath(self.base, SHM)
        elif config["run_uid"] is not None:  # "rlimits" (not unconfined)
            # Only the workdir in base is the program's; a private /dev/shm (POSIX semaphores) where there is one.
            self.config["ruleset"] = writable_only_beneath(self.base, SHM if self.private_shm else None)
            if self.config["ruleset"] is None:
                raise OSError("this kernel has no Landlock: programs could write outside their directory")
        # Same path every run, fresh directory; a name no interpreter bound under /tmp is likely to have.
        self.workdir = os.path.join(self.base, "quench-work" if self.in_namespace else "work")
        self.keep = set(config.get("keep", ()))  # read-only binds under /tmp (an interpreter there)
        os.environ["TMPDIR"] = os.environ["HOME"] = self.workdir
        self.poller = select.epoll()
        # The host needs the pid namespace to be spared in, and Landlock to keep programs out of its memory.
        spec = config.get("node_host") if self.in_namespace and self.config["ruleset"] is not None else None
        self.host_mark = spec["mark"] if spec else None
        self.host = None
        if spec:  # its time limit outlasts the server's deadline, so the server's timeout comes first
            argv = [*spec["argv"], str(int(config["timeout_s"] * 1000) + 500)]
            rlimits = [limit for limit in self.config["rlimits"] if limit[0] != resource.RLIMIT_CPU]
            # It runs programs' code too: in a Landlock domain and under the filter of its own, it can reach
            # no program's process, as none can reach it.
            self.host = NodeHost(argv, {**os.environ, **spec["env"]}, null_fd, rlimits, config["run_uid"],
                                 confine=self.confine_host)

    def confine_host(self):
        restrict_to(self.config["ruleset"])
        install(self.config["seccomp"])

    def run(self, program, announce, timeout_s=None):
        """Run one program to its end or its deadline; return what happened (pool classifies it).

        `timeout_s`: this program's wall-clock limit (a calibrated one), else the config's; its CPU
        limit follows it as SandboxLimits.cpu_seconds does.
        """
        timeout_s = timeout_s or self.config["timeout_s"]
        cpu = int(timeout_s) + 2  # as SandboxLimits.cpu_seconds
        rlimits = [(limit, cpu, cpu + 1) if limit == resource.RLIMIT_CPU else (limit, soft, hard)
                   for limit, soft, hard in self.config["rlimits"]]
        start = time.monotonic()
        code, error = compile_program(program)
        if error is not None:
            return {"record": error[0], "detail": error[1], "seconds": time.monotonic() - start}
        # The host stops a program at its own limit (the config's): one with a longer one starts node itself.
        fits = timeout_s <= self.config["timeout_s"]
        host = self.host if fits and self.host_mark and program.startswith(self.host_mark) else None
        host_fds = (host.requests, host.answers) if host is not None and host.ensure() else None
        if os.path.lexists(self.workdir):  # never the case after a clean_up that succeeded
            force_remove(self.workdir)
        os.mkdir(self.workdir, 0o700)
        if self.config["run_uid"] is not None:
            os.chown(self.workdir, self.config["run_uid"], self.config["run_uid"])
        nonce = os.urandom(16).hex().encode()
        cpu_before = children_cpu_s()
        result_r, result_w = os.pipe()
        out_r, out_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                setup_child(self.config, result_w, out_w, self.null_fd, self.workdir, host_fds, rlimits)
            except BaseException as exc:
                try:
                    os.write(RESULT_FD, nonce + b"E" + f"sandbox setup: {exc!r}".encode()[:500])
                finally:
                    os._exit(SANDBOX_EXIT)
            execute(code, nonce)
        del code
        os.close(result_w)
        os.close(out_w)
        announce(pid)
        try:
            status, stopped, record, output = self.supervise(pid, result_r, out_r, start, timeout_s)
        finally:
            seconds = time.monotonic() - start
            os.close(result_r)
            os.close(out_r)
            unhealthy = self.clean_up(pid, synced=host_fds is not None)
        cpu_s = children_cpu_s() - cpu_before  # every process of the program is reaped by now (not the host)
        kind, detail = parse_record(record, nonce)
        tail = output.decode("utf-8", "replace").strip()[-DETAIL_CHARS:]
        report = {"record": kind, "detail": detail, "status": status, "stopped": stopped, "output": tail}
        if unhealthy is not None:  # the verdict stands; this worker must not run another program
            report["unhealthy"] = unhealthy
        return {**report, "seconds": seconds, "cpu_s": round(cpu_s, 4), "timeout_s": timeout_s}

    def supervise(self, pid, result_r, out_r, start, timeout_s):
        """Collect the record and an output tail until the child exits; kill it at the deadline."""
        deadline = start + timeout_s
        pidfd = os.pidfd_open(pid)
        record, output, exited, stopped = bytearray(), bytearray(), False, None
        keep, next_count = self.config["output_bytes"], start + WATCH_INTERVAL_S
        for fd in (pidfd, result_r, out_r):
            self.poller.register(fd, select.EPOLLIN)
        while not exited:
            remaining = deadline - time.monotonic()
            if stopped is None and remaining <= 0:
                stopped = "timeout"
            elif stopped is None and self.in_namespace and time.monotonic() >= next_count:
                next_count = time.monotonic() + WATCH_INTERVAL_S
                stopped = "processes" if self.too_many_processes() else None
            if stopped is not None:
                kill_group(pid)
                if self.in_namespace:
                    kill_namespace(self.spared())
            wait = 1.0 if stopped else min(remaining, WATCH_INTERVAL_S) if self.in_namespace else remaining
            for fd, _ in self.poller.poll(wait):
                if fd == pidfd:
                    exited = True
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    self.poller.unregister(fd)
                elif fd == result_r:
                    record += chunk[: 65536 - len(record)]
                else:
                    output += chunk
                    del output[:-keep]
        os.close(pidfd)  # closing a descriptor also takes it out of the epoll set
        os.set_blocking(result_r, False)
        try:  # the record was written before the child exited, so it is in the pipe already
            while chunk := os.read(result_r, 65536):
                record += chunk[: 65536 - len(record)]
        except BlockingIOError:
            pass
        _, status = os.waitpid(pid, 0)
        return status, stopped, bytes(record), bytes(output)

    def too_many_processes(self):
        """RLIMIT_NPROC does not bind in a user namespace mapped to root, so count them here."""
        count = sum(1 for entry in os.listdir("/proc") if entry.isdigit()) - 1  # we are its init
        return count - (self.spared() is not None) > self.config["max_processes"]

    def spared(self):
        """The pid to spare when the program's processes are killed: the JavaScript host's, if it runs."""
        return self.host.pid if self.host is not None else None

    def clean_up(self, pid, synced=False):
        """Kill what the program left and remove its files; why this worker is not clean after it, or None."""
        try:
            self.kill_and_remove(pid, synced)
        except Exception as exc:  # noqa: BLE001 - any failure means a worker that must be replaced
            return f"cleanup failed: {exc!r}"[:300]
        left = leftovers("/tmp", self.keep) + leftovers(SHM) if self.in_namespace else leftovers(self.base)
        if self.private_shm:
            left += leftovers(SHM)
        return f"left after cleanup: {sorted(left)[:5]}" if left else None

    def kill_and_remove(self, pid, synced):
        kill_group(pid)
        if self.in_namespace:
            kill_namespace(self.spared())
        if synced:
            self.sync_host()
        if reap_descendants(self.pid, self.spared()) and self.host is not None:
            self.host.forget()  # the host itself ended
        if self.in_namespace:
            for scratch in ("/tmp", "/dev/shm"):
                for entry in os.listdir(scratch):
                    if os.path.join(scratch, entry) not in self.keep:
                        force_remove(os.path.join(scratch, entry))
        else:
            force_remove(self.workdir)
            for entry in os.listdir(SHM) if self.private_shm else ():
                force_remove(os.path.join(SHM, entry))

    def sync_host(self):
        """Wait until the host has answered every request, killing other processes meanwhile; stop it if it cannot."""
        host = self.host
        try:
            os.kill(host.pid, signal.SIGCONT)  # the program may have stopped it
        except ProcessLookupError:
            pass
        nonce = os.urandom(8).hex()
        give_up = time.monotonic() + HOST_SYNC_S
        try:
            write_line(host.requests, {"id": nonce, "sync": True})
        except OSError:
            give_up = 0.0
        while time.monotonic() < give_up:
            answer = host.read_line(min(give_up, time.monotonic() + WATCH_INTERVAL_S))
            if answer is not None and answer.get("id") == nonce:
                return
            kill_namespace(host.pid)  # whatever a program started meanwhile
        kill_group(host.pid)  # it will not answer: the next program starts a new one
        host.forget()

    def close(self):
        """Stop the host, reap every child, remove the scratch directory; never raises."""
        try:
            if self.host is not None:
                self.host.stop()
            reap_descendants(self.pid)
            if not self.in_namespace:
                force_remove(self.base)
        except Exception:  # noqa: BLE001 - the pool removes the scratch directory of a server that could not
            pass


def children_cpu_s():
    """User and system CPU seconds of every process this server has reaped (the subreaper's, orphans included)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def private_shm(size_mb):
    """"rlimits" mode, where root may (CAP_SYS_ADMIN): a mount namespace of our own, an empty tmpfs on /dev/shm."""
    if _libc.unshare(CLONE_NEWNS) != 0 or _libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return False
    return mount_tmpfs(SHM, f"mode=1777,size={size_mb}m")


def mount_tmpfs(path, options):
    """A fresh tmpfs on `path` (in our own mount namespace); whether it was mounted."""
    return _libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options.encode()) == 0


def parse_record(record, nonce):
    """(kind letter, detail) from the first record that carries this run's nonce, else (None, "")."""
    parts = record.split(nonce)
    if len(parts) < 2 or not parts[1][:1]:
        return None, ""
    return parts[1][:1].decode("ascii", "replace"), parts[1][1:].decode("utf-8", "replace")


def main(argv):
    config = json.loads(argv[1])
    pool_pid = int(os.environ.pop("QUENCH_POOL_PID", "0"))  # popped: programs need not see it
    proto_in, proto_out = os.dup(0), os.dup(1)  # the protocol moves off 0/1: children get /dev/null
    null_fd = os.open(os.devnull, os.O_RDWR)
    os.dup2(null_fd, 0)
    os.dup2(null_fd, 1)
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # inherited by every child, and cannot be undone
    # Programs share our uid in "bwrap" mode: none may read or write our memory or fds (/proc, ptrace);
    # forked children inherit it, what they exec does not.
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # inherited: an oversized write raises OSError
    # As a namespace's init we receive only signals we handle: handle none, not even SIGINT.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    network_isolated = config["mode"] == "bwrap"
    if not network_isolated:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if pool_pid and os.getppid() != pool_pid:  # the pool died before we got here (it may be pid 1)
            return
        network_isolated = _libc.unshare(CLONE_NEWNET) == 0  # works only with CAP_SYS_ADMIN
        if config["run_uid"] is not None:
            config["private_shm"] = private_shm(config["scratch_mb"])
    for name in PRELOAD:
        try:
            __import__(name)
        except ImportError:
            pass
    server = ForkServer(config, null_fd)
    # Children's garbage collections would otherwise touch, and so copy, every page of the
    # server's heap: ~600 copy-on-write faults per program instead of ~170.
    gc.freeze()
    scratch = None if server.in_namespace else server.base  # the pool removes it if it kills us
    ready = {"ready": True, "network_isolated": network_isolated, "uid": os.getuid(), "scratch": scratch}
    write_frame(proto_out, ready)
    announce = (lambda pid: write_frame(proto_out, {"started": pid})) if not server.in_namespace else (lambda pid: None)
    try:
        while (request := read_frame(proto_in)) is not None:
            try:
                result = server.run(request["program"], announce, request.get("timeout_s"))
            except Exception as exc:  # a harness failure must still answer, then the pool replaces us
                detail = f"fork server: {exc!r}"
                result = {"record": "E", "detail": detail, "seconds": 0.0, "unhealthy": detail[:300]}
            write_frame(proto_out, result)
            if "unhealthy" in result:
                break
    finally:
        server.close()


if __name__ == "__main__":
    main(sys.argv)
