"""What runs in each program's forked process: its set-up, its confinement, and the program itself (stdlib only).

Part of the worker's script (sandbox.fork_server_script), after node_host.py and before forkserver.py,
whose fork server calls `setup_child` then `execute` in every child. The order of `setup_child` is
the confinement's: a session and descriptors of its own, the Landlock domain, the working
directory, rlimits and the drop to the program's uid, then the seccomp filter, last. A new
descriptor for the program goes in `setup_child` (below RESULT_FD + 3 it would clash with the
JavaScript host's pipes).
"""

import ctypes
import os
import resource
import signal
import sys

from quench.execution.landlock import restrict_to  # the script: landlock.py's text first,
from quench.execution.seccomp import install  # then seccomp.py's
from quench.execution.node_host import limit_and_drop  # and node_host.py's

RESULT_FD = 3  # where the child's completion record goes
HOST_REQUESTS, HOST_ANSWERS = 4, 5  # in a child that may use the JavaScript host (RESULT_FD + 1, + 2)
DETAIL_CHARS = 300
PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def describe(exc, type_=type, str_=str, isinstance_=isinstance, syntax_error=SyntaxError):
    """'Type: message tail (line N)'; builtins are bound as defaults: the program may replace them."""
    message = str_(exc.msg if isinstance_(exc, syntax_error) else exc)
    text = type_(exc).__name__ + (": " + message[-DETAIL_CHARS:] if message else "")
    line = exc.lineno if isinstance_(exc, syntax_error) else None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<program>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return text if line is None else text + " (line " + str_(line) + ")"


def execute(code, nonce):
    """Run compiled program `code` in this (child) process, report through RESULT_FD; never returns.

    Everything used after `exec` is bound to a local first: the program may replace builtins,
    patch `os` or this module (`import __main__`), or install a trace function.
    """
    write, exit_, settrace, setprofile, describe_ = os.write, os._exit, sys.settrace, sys.setprofile, describe
    system_exit, memory_error, base_exception = SystemExit, MemoryError, BaseException
    streams = (sys.stdout, sys.stderr)
    passed_record, memory_record = nonce + b"P", nonce + b"M"

    def report(kind, exc):
        settrace(None)
        setprofile(None)
        for stream in streams:
            try:
                stream.flush()
            except base_exception:
                pass
        record = passed_record if kind == b"P" else memory_record
        if kind != b"P":
            try:  # may fail for lack of memory: then the bare memory record goes out
                record = nonce + kind + describe_(exc).encode("utf-8", "replace")
            except base_exception:
                pass
        try:
            write(RESULT_FD, record)
        finally:
            exit_(0)

    try:
        exec(code, {"__name__": "__quench_program__", "__builtins__": __builtins__})
    except system_exit as exc:
        report(b"X", exc)
    except memory_error as exc:
        report(b"M", exc)
    except base_exception as exc:
        report(b"F", exc)
    report(b"P", None)


def compile_program(program):
    """(code, None) or (None, (kind, detail)); compiled in the server so no child pays for it."""
    try:
        return compile(program, "<program>", "exec"), None
    except MemoryError as exc:
        return None, ("M", describe(exc))
    except (SyntaxError, ValueError) as exc:  # ValueError: null bytes in the source
        return None, ("S", describe(exc))
    except Exception as exc:  # e.g. RecursionError for absurdly nested code
        return None, ("F", describe(exc))


def setup_child(config, result_w, out_w, null_fd, workdir, host_fds=None, rlimits=None):
    """In the forked child: own session, private fds, fresh cwd, rlimits, then drop privileges.

    Kept short on purpose: every page the child writes is a copy-on-write fault.
    """
    os.setsid()
    os.dup2(null_fd, 0)
    os.dup2(out_w, 1)
    os.dup2(out_w, 2)
    os.dup2(result_w, RESULT_FD)
    if config["ruleset"] is not None:  # "rlimits" mode: writable only beneath the scratch directory
        restrict_to(config["ruleset"])
    if host_fds is not None:  # the server holds them at HIGH_FD and above: no clash
        os.dup2(host_fds[0], HOST_REQUESTS)
        os.dup2(host_fds[1], HOST_ANSWERS)
    os.closerange(HOST_ANSWERS + 1 if host_fds else RESULT_FD + 1, 65536)  # protocol pipes, the rest
    os.chdir(workdir)
    if "random" in sys.modules:  # as after a fresh import, not the state every run would share
        sys.modules["random"].seed()
    limit_and_drop(rlimits or config["rlimits"], config["run_uid"])
    if config["mode"] == "rlimits":  # no pid namespace: at least die with the server
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    install(config["seccomp"])  # last: no ptrace-class call, no IPC object, no other process's limits


def child_rlimits(config):
    megabyte = 1024 * 1024
    cpu = config["cpu_seconds"]
    return [
        (resource.RLIMIT_CPU, cpu, cpu + 1),  # SIGXCPU first, SIGKILL a second later
        (resource.RLIMIT_AS, config["memory_mb"] * megabyte, config["memory_mb"] * megabyte),
        (resource.RLIMIT_FSIZE, config["file_size_mb"] * megabyte, config["file_size_mb"] * megabyte),
        (resource.RLIMIT_NPROC, config["nproc"], config["nproc"]),
        (resource.RLIMIT_CORE, 0, 0),
    ]
