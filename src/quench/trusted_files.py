"""Files quench loads code from: only what this user made, unchanged since it made them.

A file is *trusted* under a root directory (a cache) when
- it and every directory from it up to the root (included) is owned by this process's effective
  uid, and none is writable by group or others (so no other user can plant, swap or edit it);
- it is a regular file, not a link (nor is any directory below the root);
- its content has the SHA-256 recorded by the builder when it was made: the sidecar
  `<file>.sha256` (itself trusted by the first two rules), written atomically by `record`.

Builders call `record(path)` once the file is final; loaders call `check(path, root)` (raises) or
`problem(path, root)` (a reason, or None). `tree_problems(root)` checks every file under a root
that other processes read from (a directory bound into a sandbox), sidecars included. Digests are
remembered per (device, inode, size, mtime, ctime), so a file checked once costs a `stat` after.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from pathlib import Path

from quench.errors import QuenchError

SIDECAR = ".sha256"
FOREIGN_WRITE = stat.S_IWGRP | stat.S_IWOTH
CHUNK = 1 << 20

_digests: dict[tuple[int, int, int, int, int], str] = {}


class UntrustedFileError(QuenchError):
    """A file quench would load code from that this user did not make, or that changed since."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}; remove it and quench rebuilds it")
        self.path = path
        self.reason = reason


def sidecar(path: Path) -> Path:
    """Where `path`'s recorded hash lives."""
    return path.with_name(path.name + SIDECAR)


def digest(path: Path) -> str:
    """SHA-256 of the file's content (hex), remembered until the file changes."""
    info = os.stat(path)
    key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    if key not in _digests:
        hasher = hashlib.sha256()
        with open(path, "rb") as handle:
            while chunk := handle.read(CHUNK):
                hasher.update(chunk)
        _digests[key] = hasher.hexdigest()
    return _digests[key]


def record(path: Path, kept_as: Path | None = None) -> Path:
    """Write `path`'s hash to its sidecar, or to the sidecar of `kept_as` (where the builder is about to
    move it), atomically (a reader sees the old sidecar or the new); return the sidecar."""
    target = sidecar(kept_as or path)
    descriptor, temporary = tempfile.mkstemp(dir=target.parent, prefix=".", suffix=SIDECAR)
    try:
        with os.fdopen(descriptor, "w", encoding="ascii") as handle:
            handle.write(digest(path) + "\n")
        os.chmod(temporary, 0o644)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target


def owner_problem(info: os.stat_result, subject: str = "") -> str | None:
    """Why a file or directory with `info` may be another user's doing (`subject` leads the reason), or None."""
    if info.st_uid != os.geteuid():
        return f"{subject}is owned by uid {info.st_uid}, not by this user (uid {os.geteuid()})"
    if info.st_mode & FOREIGN_WRITE:
        who = "group" if info.st_mode & stat.S_IWGRP else "others"
        return f"{subject}is writable by {who} (mode {info.st_mode & 0o7777:o})"
    return None


def ownership_problem(path: Path, root: Path) -> str | None:
    """Why `path` could have been made or changed by someone else: its owner or mode, or a directory's up to `root`."""
    root, path = Path(os.path.abspath(root)), Path(os.path.abspath(path))
    if root not in path.parents:
        return f"is not under {root}"
    try:
        info = os.lstat(path)
    except OSError as err:
        return f"cannot be read ({err.strerror})"
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file"
    found, directory = owner_problem(info), path.parent
    while found is None and (directory == root or root in directory.parents):
        here = os.stat(directory) if directory == root else os.lstat(directory)
        if not stat.S_ISDIR(here.st_mode):
            return f"its directory {directory} is a link"
        found = owner_problem(here, f"its directory {directory} ")
        directory = directory.parent
    return found


def problem(path: Path, root: Path) -> str | None:
    """Why `path` is not trusted under `root` (see the module's rules), or None when it is."""
    path = Path(path)
    found = ownership_problem(path, root)
    if found is not None:
        return found
    if not os.path.lexists(sidecar(path)):
        return f"has no recorded hash ({sidecar(path).name}): quench did not build it"
    found = ownership_problem(sidecar(path), root)
    if found is not None:
        return f"its recorded hash {sidecar(path).name} {found}"
    try:
        recorded = sidecar(path).read_text(encoding="ascii").strip()
        actual = digest(path)
    except (OSError, UnicodeDecodeError) as err:
        return f"cannot be checked ({err})"
    return None if recorded == actual else "changed since it was built: its hash is not the recorded one"


def check(path: Path, root: Path) -> Path:
    """`path`, when trusted under `root`; else raise UntrustedFileError naming it and why."""
    found = problem(path, root)
    if found is not None:
        raise UntrustedFileError(Path(path), found)
    return Path(path)


def private(info: os.stat_result) -> bool:
    """Whether only its owner, this user, can use it (a builder's scratch directory or temporary file)."""
    return info.st_uid == os.geteuid() and not info.st_mode & 0o077 and not stat.S_ISLNK(info.st_mode)


def tree_problems(root: Path, skip_private: bool = True) -> list[tuple[Path, str]]:
    """(path, reason) for everything under `root` that is not trusted: every file (each sidecar with
    its file) and every directory. What only its owner can use (a builder's scratch directory and
    what it holds, a temporary file) is skipped when `skip_private`: no other user reads from it."""
    root = Path(os.path.abspath(root))
    if not root.is_dir():
        return []
    found: list[tuple[Path, str]] = []
    for directory, subdirs, files in os.walk(root):
        here = Path(directory)
        info = os.stat(here) if here == root else os.lstat(here)
        reason = owner_problem(info)
        if reason is not None:
            found.append((here, reason))
        for name in list(subdirs):
            below = os.lstat(here / name)
            if stat.S_ISLNK(below.st_mode):
                found.append((here / name, "is a symbolic link"))
                subdirs.remove(name)
            elif skip_private and private(below):
                subdirs.remove(name)
        for name in files:
            path = here / name
            if name.endswith(SIDECAR) and os.path.lexists(path.with_name(name[: -len(SIDECAR)])):
                continue  # checked with its file
            if skip_private and private(os.lstat(path)):
                continue
            reason = problem(path, root)
            if reason is not None:
                found.append((path, reason))
    return found
