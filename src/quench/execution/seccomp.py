"""A seccomp filter for every program: no reach into other processes, no IPC object that could outlive it (stdlib only).

Landlock (landlock.py) already keeps a program from ptrace, /proc/<pid>/mem and signals of any
process outside its own; what it leaves to uids (which the warm hosts share with programs in
"bwrap" mode) is refused here, in each program's process before its first instruction:
- ptrace-class calls (ptrace, process_vm_readv/writev, kcmp, pidfd_getfd, process_madvise,
  perf_event_open);
- changing another process's limits, priority or scheduling (prlimit64, setpriority, ioprio_set,
  sched_set*): allowed only on the calling process itself (pid 0);
- System V shared memory, semaphores and message queues, POSIX message queues and keyrings:
  objects that live in the kernel, not in the process, so they would outlive the program and
  escape its memory limit. POSIX shared memory and semaphores are files in /dev/shm, a
  size-limited tmpfs wiped after every program.
A refused call fails with EPERM; a call through another ABI (32-bit or x32) kills the process.
Filters exist for x86-64 and arm64; elsewhere `program_filter` is None and the fork server refuses to start.
"""

import ctypes
import os
import platform
import struct

PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
LD_W_ABS, JEQ_K, JGE_K, RET_K = 0x20, 0x15, 0x35, 0x06
RET_ALLOW, RET_KILL_PROCESS, RET_ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
EPERM = 1
NR_OFFSET, ARCH_OFFSET = 0, 4
X32_BIT = 0x40000000
# Per architecture: its audit id, the calls refused outright, and the calls allowed only when the
# given arguments (index: required value) name the calling process itself.
SYSCALLS = {
    "x86_64": {
        "arch": 0xC000003E,
        "refused": {
            "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "pidfd_getfd": 438,
            "process_madvise": 440, "perf_event_open": 298,
            "shmget": 29, "shmat": 30, "shmctl": 31, "shmdt": 67, "semget": 64, "semop": 65, "semctl": 66,
            "semtimedop": 220, "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71,
            "mq_open": 240, "mq_unlink": 241, "mq_timedsend": 242, "mq_timedreceive": 243, "mq_notify": 244,
            "mq_getsetattr": 245, "add_key": 248, "request_key": 249, "keyctl": 250,
        },
        "self_only": {
            "prlimit64": (302, {0: 0}), "setpriority": (141, {0: 0, 1: 0}), "ioprio_set": (251, {0: 1, 1: 0}),
            "sched_setaffinity": (203, {0: 0}), "sched_setparam": (142, {0: 0}),
            "sched_setscheduler": (144, {0: 0}), "sched_setattr": (314, {0: 0}),
        },
    },
    "aarch64": {
        "arch": 0xC00000B7,
        "refused": {
            "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "kcmp": 272, "pidfd_getfd": 438,
            "process_madvise": 440, "perf_event_open": 241,
            "shmget": 194, "shmat": 196, "shmctl": 195, "shmdt": 197, "semget": 190, "semop": 193, "semctl": 191,
            "semtimedop": 192, "msgget": 186, "msgsnd": 189, "msgrcv": 188, "msgctl": 187,
            "mq_open": 180, "mq_unlink": 181, "mq_timedsend": 182, "mq_timedreceive": 183, "mq_notify": 184,
            "mq_getsetattr": 185, "add_key": 217, "request_key": 218, "keyctl": 219,
        },
        "self_only": {
            "prlimit64": (261, {0: 0}), "setpriority": (140, {0: 0, 1: 0}), "ioprio_set": (30, {0: 1, 1: 0}),
            "sched_setaffinity": (122, {0: 0}), "sched_setparam": (118, {0: 0}),
            "sched_setscheduler": (119, {0: 0}), "sched_setattr": (274, {0: 0}),
        },
    },
}
_libc = ctypes.CDLL(None, use_errno=True)


def instruction(code, k, jt=0, jf=0):
    return struct.pack("=HBBI", code, jt, jf, k)


def argument_offset(index):
    """Where the low 32 bits of argument `index` sit in struct seccomp_data (little-endian)."""
    return 16 + 8 * index


def self_only_block(number, required):
    """Instructions: for syscall `number`, allow it when every argument in `required` has its value, else EPERM."""
    checks = []
    for index, value in required.items():
        checks.append(("load", index))
        checks.append(("equal", value))
    body_length = len(checks) + 2  # then RET ALLOW, RET EPERM
    block = [instruction(JEQ_K, number, 0, body_length)]
    for position, (kind, value) in enumerate(checks):
        if kind == "load":
            block.append(instruction(LD_W_ABS, argument_offset(value)))
        else:  # not equal: jump to RET EPERM, the block's last instruction
            block.append(instruction(JEQ_K, value, 0, body_length - position - 2))
    return block + [instruction(RET_K, RET_ALLOW), instruction(RET_K, RET_ERRNO | EPERM)]


def program_filter(machine=None):
    """The BPF program (bytes of struct sock_filter) for this machine's architecture; None where there is none."""
    table = SYSCALLS.get(machine or platform.machine())
    if table is None:
        return None
    deny = instruction(RET_K, RET_ERRNO | EPERM)
    code = [
        instruction(LD_W_ABS, ARCH_OFFSET),
        instruction(JEQ_K, table["arch"], 1, 0),
        instruction(RET_K, RET_KILL_PROCESS),  # another ABI's numbers mean other calls
        instruction(LD_W_ABS, NR_OFFSET),
        instruction(JGE_K, X32_BIT, 0, 1),
        deny,
    ]
    refused = sorted(table["refused"].values())
    for position, number in enumerate(refused):  # each jumps to the shared EPERM after the list
        code.append(instruction(JEQ_K, number, len(refused) - position, 0))
    code.append(instruction(0x05, 1))  # JA over the shared EPERM
    code.append(deny)
    for number, required in table["self_only"].values():
        code += self_only_block(number, required)
    code.append(instruction(RET_K, RET_ALLOW))
    return b"".join(code)


def prepare(filter_bytes):
    """The struct sock_fprog for `filter_bytes`, built once in the fork server: (fprog, the filter it points to)."""
    code = ctypes.create_string_buffer(filter_bytes, len(filter_bytes))
    fprog = struct.pack("=HxxxxxxQ", len(filter_bytes) // 8, ctypes.addressof(code))
    return ctypes.create_string_buffer(fprog, len(fprog)), code


def install(prepared):
    """Put this process (and all it starts) under a `prepare`d filter; needs no_new_privs (the fork server sets it)."""
    if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, prepared[0], 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, "seccomp filter: " + os.strerror(errno))
