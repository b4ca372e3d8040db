"""Killing and reaping what a program leaves behind in a sandbox worker (stdlib only).

Its process group, the other processes of the worker's pid namespace (all but one spared pid), the
descendants that escaped both (re-parented to the fork server, a child subreaper), and its scratch
files. The first part of the worker's script (sandbox.fork_server_script), before node_host.py and
forkserver.py, which use it.
"""

import os
import signal
import stat
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
    """Remove a file or a whole tree, however deep, unreadable or linked; no recursion, no link followed.

    Only for trees no process is changing any more: it walks down by file descriptor and back up by "..".
    """
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            os.unlink(path)
            return
    except FileNotFoundError:
        return
    parent, name = os.path.split(os.path.abspath(path))
    top = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        remove_tree_at(top, name)
    finally:
        os.close(top)


def remove_tree_at(top, name):
    """Remove directory `name` of directory fd `top` and all beneath it, one level open at a time.

    Each directory is listed once: its files go at once, its subdirectories wait on a stack of names.
    """
    names = [name]
    current = open_writable(top, name)
    try:
        pending = [unlink_files(current)]
        while names:
            if pending[-1]:
                below = pending[-1].pop()
                child = open_writable(current, below)
                os.close(current)
                current = child
                names.append(below)
                pending.append(unlink_files(current))
                continue
            parent = top if len(names) == 1 else os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=current)
            os.close(current)
            current = parent
            os.rmdir(names.pop(), dir_fd=parent)
            pending.pop()
    finally:
        if current != top:
            os.close(current)


def unlink_files(directory):
    """Unlink every entry of `directory` (an fd) but its subdirectories; return their names."""
    with os.scandir(directory) as entries:  # listed whole first: nothing is unlinked under a running listing
        listed = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries]
    for name, is_directory in listed:
        if not is_directory:
            try:
                os.unlink(name, dir_fd=directory)
            except FileNotFoundError:
                pass
    return [name for name, is_directory in listed if is_directory]


def open_writable(directory, name):
    """Open subdirectory `name` of fd `directory`, made ours to list and change first (a program may chmod 000 it)."""
    if os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode & 0o700 != 0o700:
        os.chmod(name, 0o700, dir_fd=directory)  # a real directory (lstat): chmod follows no link
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=directory)


def leftovers(directory, keep=()):
    """What is left in `directory` but `keep` (full paths): a worker whose scratch is not empty is not healthy."""
    try:
        return [entry for entry in os.listdir(directory) if os.path.join(directory, entry) not in keep]
    except FileNotFoundError:
        return []
