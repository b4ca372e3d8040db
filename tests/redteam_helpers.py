"""What the red-team tests' hostile programs share: a prelude of helpers each program starts with."""

# Helpers every attack may use: `refused(name, call)` runs a call that must fail; a ctypes call
# that returns -1 counts as refused.
PRELUDE = """
import ctypes, errno, os, resource, signal, socket, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

def refused(name, call):
    try:
        result = call()
    except OSError:
        return
    if isinstance(result, int) and result == -1:
        return
    raise AssertionError(name + " was allowed: " + repr(result))

def others():
    '''The pids of every process this program can see but its own.'''
    return [int(p) for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()]
"""
