"""The warm node host: one node process kept across JavaScript programs (stdlib only).

node_host.js, started by `NodeHost`, runs each program it is asked for in a fresh V8 context, so
node starts once per sandbox worker instead of once per program. The fork server starts it inside
the worker's sandbox on first use, under the programs' uid and rlimits but the CPU one, in a Landlock domain
and under a seccomp filter of its own (it runs programs' code, and must reach no program); requests and
answers are JSON lines on a pair of pipes. What the host may do with a context once its program
runs (the boundary that keeps one program from another's verdict) is stated at the top of node_host.js.

The pool runs cleanup.py's text, this file's, then forkserver.py's as one `python -s -P -c` script
(sandbox.fork_server_script), so it imports nothing of quench: the fork server takes from here the
helpers both use (the limits, high fds, JSON lines).
"""

import fcntl
import json
import os
import resource
import select
import signal
import time

from quench.execution.cleanup import kill_group  # the script: cleanup.py's text comes first

HIGH_FD = 100  # the server keeps the host's pipes at or above this, clear of the fds it hands out
SANDBOX_EXIT = 125  # a child that could not set itself up (same value in outcomes.py)


def limit_and_drop(rlimits, uid):
    """Set `rlimits` ((resource, soft, hard) triples), then become `uid` (None: stay who we are)."""
    for limit, soft, hard in rlimits:
        resource.setrlimit(limit, (soft, hard))
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)


def high_fd(fd):
    """`fd` moved to HIGH_FD or above (close-on-exec); the original is closed."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, HIGH_FD)
    os.close(fd)
    return moved


class NodeHost:
    """A warm node kept across programs (node_host.js): it runs each JavaScript program in a fresh context.

    `argv` and the whole environment `env` start it, in a session of its own, with `rlimits` and as
    `uid` (None: this process's), `confine` (a function, None: nothing) called just before node
    starts; requests and answers are JSON lines. Started by `ensure`; a `None` pid: not running.
    """

    def __init__(self, argv, env, null_fd, rlimits=(), uid=None, confine=None):
        self.argv, self.env, self.null_fd = argv, env, null_fd
        self.rlimits, self.uid, self.confine = rlimits, uid, confine
        self.pid = None
        self.requests = self.answers = None
        self.buffer = bytearray()

    def ensure(self):
        """Running (started now if it was not, resumed if a program stopped it); False if it cannot start."""
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGCONT)
                return True
            except ProcessLookupError:
                self.forget()
        if not all(os.path.exists(path) for path in self.argv[:2]):
            return False
        requests_r, requests_w = os.pipe()
        answers_r, answers_w = os.pipe()
        requests_r, answers_w = high_fd(requests_r), high_fd(answers_w)
        try:
            self.pid = os.fork()
        except OSError:
            self.pid = None
        if self.pid == 0:
            try:
                self.become_host(requests_r, answers_w)
            finally:
                os._exit(SANDBOX_EXIT)
        os.close(requests_r)
        os.close(answers_w)
        if self.pid is None:
            os.close(requests_w)
            os.close(answers_r)
            return False
        self.requests, self.answers = high_fd(requests_w), high_fd(answers_r)
        self.buffer.clear()
        return True

    def become_host(self, requests_r, answers_w):
        """In the forked child: its own session, the pipes as fds 0 and 3, the limits, then node."""
        os.setsid()
        os.dup2(requests_r, 0)
        os.dup2(self.null_fd, 1)
        os.dup2(self.null_fd, 2)
        os.dup2(answers_w, 3)
        if self.confine is not None:  # before the fds close: a Landlock ruleset is one
            self.confine()
        os.closerange(4, 65536)
        limit_and_drop(self.rlimits, self.uid)
        for number in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT):
            signal.signal(number, signal.SIG_DFL)
        os.execve(self.argv[0], self.argv, self.env)

    def request(self, message, deadline):
        """Send one request; the answer that carries its id, or None (no answer by `deadline`, or gone)."""
        try:
            write_line(self.requests, message)
            while True:
                answer = self.read_line(deadline)
                if answer is None or answer.get("id") == message["id"]:
                    return answer
        except (OSError, ValueError):
            return None

    def read_line(self, deadline):
        while b"\n" not in self.buffer:
            ready, _, _ = select.select([self.answers], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(self.answers, 65536) if ready else b""
            if not chunk:
                return None
            self.buffer += chunk
        line, _, rest = bytes(self.buffer).partition(b"\n")
        self.buffer[:] = rest
        return json.loads(line)

    def forget(self):
        """Its pipes closed; it is gone (or about to be: killed by the caller)."""
        for fd in (self.requests, self.answers):
            if fd is not None:
                os.close(fd)
        self.pid = self.requests = self.answers = None

    def stop(self):
        if self.pid is not None:
            kill_group(self.pid)
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
            self.forget()


def write_line(fd, message):
    view = memoryview(json.dumps(message).encode() + b"\n")
    while view:
        view = view[os.write(fd, view):]
