"""Starts bubblewrap as a worker's own unprivileged uid, from root (stdlib only; run as a `-c` script).

bubblewrap maps the sandbox's user to the uid that starts it, so started by root its "nobody" is
root outside. Started by a worker uid instead, it cannot reach what it must bind where the way
there is closed to others (an interpreter or build cache under /root). So, still as root, this
script opens each such directory, enters a mount namespace of its own, mounts a small tmpfs over
STAGE and binds each directory at STAGE/<index> (a path anyone may traverse, in this namespace
only); then it clears its groups, becomes the worker uid and execs bubblewrap, which binds them
from there. The config (JSON, argv[1]): {"uid": worker uid, "stage": [source paths], "argv": bwrap's argv}.
"""

import ctypes
import json
import os
import sys

STAGE = "/tmp"  # hidden only in this namespace; bwrap reads nothing else there
CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 8, 4096, 16384, 1 << 18


def staged(index):
    """Where the `index`th staged source appears to bubblewrap."""
    return f"{STAGE}/{index}"


def stage(sources, libc):
    """Bind each of `sources` at staged(index), in a mount namespace of our own.

    Each is opened in the new namespace (a bind's source must be one of its mounts) before the
    tmpfs hides the host's STAGE.
    """
    check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "making / private")
    fds = [os.open(source, os.O_PATH | os.O_CLOEXEC) for source in sources]
    check(libc.mount(b"tmpfs", STAGE.encode(), b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, b"mode=0755,size=64k"),
          f"a tmpfs on {STAGE}")
    for index, fd in enumerate(fds):
        target = staged(index)
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.mkdir(target, 0o755)
        else:
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
        check(libc.mount(f"/proc/self/fd/{fd}".encode(), target.encode(), None, MS_BIND | MS_REC, None),
              f"binding {sources[index]}")
        os.close(fd)


def check(result, what):
    if result != 0:
        raise OSError(ctypes.get_errno(), f"{what}: {os.strerror(ctypes.get_errno())}")


def become(uid):
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


def main(argv):
    config = json.loads(argv[1])
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        stage(config["stage"], libc)
        become(config["uid"])
        os.execv(config["argv"][0], config["argv"])
    except OSError as err:
        sys.stderr.write(f"quench sandbox launcher: {err}\n")
        os._exit(126)


if __name__ == "__main__":
    main(sys.argv)
