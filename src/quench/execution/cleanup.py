"""Killing and reaping what a program leaves behind in a sandbox worker (stdlib only).

Its process group, the other processes of the worker's pid namespace (all but one spared pid), the
descendants that escaped both (re-parented to the fork server, a child subreaper), and its scratch
files. The first part of the worker's script (sandbox.fork_server_script), before node_host.py and
forkserver.py, which use it.
"""

import os
import shutil
import signal
import time

HOST_SYNC_S = 5.0  # how long killing what a program left, or the host answering every request, may take


def kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_namespace(spare=None):
    """Kill every process of this pid namespace except us (its init) and `spare`.

    Without `spare`, one kill(-1). With it, pid by pid, each pass stopping every process before
    killing it (a stopped process cannot fork), until no live one is left but the two.
    """
    if spare is None:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return
    give_up = time.monotonic() + HOST_SYNC_S
    while (others := living_except(spare)) and time.monotonic() < give_up:
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in others:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass


def living_except(spare):
    """The pids of this namespace that are neither us, `spare` nor dead (zombies wait to be reaped)."""
    me = os.getpid()
    return [int(entry) for entry in os.listdir("/proc")
            if entry.isdigit() and int(entry) not in (me, spare) and state_of(entry) not in ("Z", "X", None)]


def state_of(pid):
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def children_of(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(child) for child in handle.read().split()]
    except FileNotFoundError:  # kernel without CONFIG_PROC_CHILDREN: scan every process
        return [int(entry) for entry in os.listdir("/proc") if entry.isdigit() and parent_of(entry) == pid]


def parent_of(pid):
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def reap_descendants(self_pid, spare=None, patience_s=5.0):
    """Kill and reap every child but `spare`; orphans of escaped daemons re-parent to us (subreaper).

    Returns whether `spare` was reaped (it had ended).
    """
    give_up = time.monotonic() + patience_s
    spare_ended = False
    while time.monotonic() < give_up:
        try:
            while (reaped := os.waitpid(-1, os.WNOHANG)[0]) > 0:
                spare_ended = spare_ended or reaped == spare
        except ChildProcessError:
            return spare_ended  # no children left at all
        children = [child for child in children_of(self_pid) if spare_ended or child != spare]
        if not children:
            return spare_ended
        for child in children:
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.0005)
    return spare_ended


def force_remove(path):
    """Remove a file or tree even if a program made it unreadable."""

    def fix(function, failed_path, exc_info):
        for target in (os.path.dirname(failed_path), failed_path):
            try:
                os.chmod(target, 0o700)
            except OSError:
                pass
        if os.path.isdir(failed_path) and not os.path.islink(failed_path):
            shutil.rmtree(failed_path, ignore_errors=True)
        else:
            try:
                os.unlink(failed_path)
            except OSError:
                pass

    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, onerror=fix)
    elif os.path.lexists(path):
        fix(None, path, None)
