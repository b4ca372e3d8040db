"""Worker uids: one unprivileged uid per sandbox worker that no other process on the machine uses.

Run as root, quench gives each worker a uid of its own from a reserved range, so that a program
owns no file outside its scratch space and can signal no process but its own. A uid is taken
when no process runs as it (checked in /proc), no account names it, and this quench process holds
its lock (flock on a file in a root-only directory), so two quench processes never share one.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import stat
from dataclasses import dataclass

# Above systemd's container range (which ends at 1879048191) and below 2**31, where some tools
# misread uids as negative; distributions allocate nothing here.
UID_BASE = 2_080_000_000
UID_COUNT = 65_536
LOCK_DIRS = ("/run/quench-uids", "/tmp/quench-uids-0")  # the first that is usable, root-only


@dataclass(frozen=True)
class WorkerUid:
    """A uid (also the gid) held for one worker until `release`."""

    uid: int
    lock_fd: int

    def release(self) -> None:
        try:
            os.close(self.lock_fd)  # closing drops the flock
        except OSError:
            pass


def allocate(count: int) -> list[WorkerUid]:
    """`count` worker uids; empty when quench does not run as root (it cannot switch users then)."""
    if os.geteuid() != 0 or count < 1:
        return []
    lock_dir = _lock_dir()
    busy = uids_in_use()
    taken: list[WorkerUid] = []
    start = os.getpid() % UID_COUNT  # different processes start apart: fewer lock collisions
    for offset in range(UID_COUNT):
        uid = UID_BASE + (start + offset) % UID_COUNT
        if uid in busy or _has_account(uid):
            continue
        held = _lock(lock_dir, uid)
        if held is not None:
            taken.append(held)
            if len(taken) == count:
                return taken
    for held in taken:
        held.release()
    raise OSError(f"no free uid in {UID_BASE}..{UID_BASE + UID_COUNT - 1} for {count} sandbox workers")


def uids_in_use() -> set[int]:
    """Every real, effective, saved and filesystem uid of a process visible in /proc."""
    found: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", encoding="ascii", errors="replace") as handle:
                for line in handle:
                    if line.startswith("Uid:"):
                        found.update(int(value) for value in line.split()[1:])
                        break
        except OSError:
            continue
    return found


def _has_account(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def _lock_dir() -> str:
    """A directory only root can write (created if missing), for the uid locks."""
    for path in LOCK_DIRS:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError:
            continue
        info = os.lstat(path)
        if stat.S_ISDIR(info.st_mode) and info.st_uid == 0 and not info.st_mode & 0o022:
            return path
    raise OSError(f"no root-only directory for sandbox uid locks (tried {', '.join(LOCK_DIRS)})")


def _lock(lock_dir: str, uid: int) -> WorkerUid | None:
    fd = os.open(os.path.join(lock_dir, str(uid)), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return WorkerUid(uid, fd)
