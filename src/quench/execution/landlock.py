"""Landlock rules for the "rlimits" mode: a program may write only beneath its own directory (stdlib only).

Without namespaces, a program could write where every user may (/tmp, /var/tmp, /dev/shm). Landlock
(Linux 5.13+, the kernel's unprivileged sandbox, docs.kernel.org/userspace-api/landlock.html) lets
the fork server take that away: the rights to create, write, truncate, rename and remove files are
"handled", so they are denied except beneath the worker's scratch directory and on the harmless
devices. Where the kernel scopes signals and abstract unix sockets (ABI 6, Linux 6.12), a program
also cannot signal, or connect to, any process outside its own processes. Reading stays governed
by file permissions. The first part of the worker's script (sandbox.fork_server_script).
"""

import ctypes
import os
import struct

SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446  # the same on x86-64 and arm64
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1
WRITE_FILE = 1 << 1
# Every right that changes the file system (ABI 1), then REFER (ABI 2: rename and link across
# directories) and TRUNCATE (ABI 3).
CHANGE_RIGHTS = sum(1 << bit for bit in (1, 4, 5, 6, 7, 8, 9, 10, 11, 12))
REFER, TRUNCATE = 1 << 13, 1 << 14
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1, 2
WRITABLE_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def landlock_abi():
    """The kernel's Landlock ABI version; 0 where it has none (or it is disabled)."""
    version = _libc.syscall(ctypes.c_long(SYS_CREATE_RULESET), None, ctypes.c_size_t(0),
                            ctypes.c_uint32(CREATE_RULESET_VERSION))
    return max(int(version), 0)


def change_rights(abi):
    return CHANGE_RIGHTS | (REFER if abi >= 2 else 0) | (TRUNCATE if abi >= 3 else 0)


def writable_only_beneath(directory, shared=None):
    """A ruleset fd that lets a process change files only beneath `directory` and `shared` (and write the devices).

    None where the kernel has no Landlock. Applied in each program's process by `restrict_to`.
    """
    abi = landlock_abi()
    if abi < 1:
        return None
    handled = change_rights(abi)
    # struct landlock_ruleset_attr grew a field at ABI 4 (network) and ABI 6 (scopes).
    if abi >= 6:
        attr = struct.pack("=QQQ", handled, 0, SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL)
    elif abi >= 4:
        attr = struct.pack("=QQ", handled, 0)
    else:
        attr = struct.pack("=Q", handled)
    buffer = ctypes.create_string_buffer(attr, len(attr))
    ruleset = _libc.syscall(ctypes.c_long(SYS_CREATE_RULESET), buffer, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset: " + os.strerror(ctypes.get_errno()))
    file_rights = WRITE_FILE | (TRUNCATE if abi >= 3 else 0)  # all a rule on a file (not a directory) may name
    for path in (directory, shared):
        if path is not None:
            allow(ruleset, path, handled)
    for device in WRITABLE_DEVICES:
        if os.path.exists(device):
            allow(ruleset, device, file_rights)
    return int(ruleset)


def allow(ruleset, path, rights):
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        rule = ctypes.create_string_buffer(struct.pack("=Qi", rights, fd), 12)  # packed path_beneath_attr
        if _libc.syscall(ctypes.c_long(SYS_ADD_RULE), ctypes.c_int(ruleset), ctypes.c_int(RULE_PATH_BENEATH), rule,
                         ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}: " + os.strerror(ctypes.get_errno()))
    finally:
        os.close(fd)


def restrict_to(ruleset):
    """Put this process (and all it starts) under `ruleset`; needs no_new_privs (the fork server sets it)."""
    if _libc.syscall(ctypes.c_long(SYS_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
        raise OSError(ctypes.get_errno(), "landlock_restrict_self: " + os.strerror(ctypes.get_errno()))
