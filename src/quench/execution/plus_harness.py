"""The MBPP+ judge that each sandboxed program is (its source is embedded, see plus.py).

Glossary:
- input: one argument list; expected: what the reference returned for it, held as ("v", value),
  or for a large simple value as ("d", digest, digest made simple) (plus_values.py); limit: the
  input's time limit.
- stage: "base" (MBPP's own inputs) or "plus" (EvalPlus's extra inputs); base runs first.
- candidate: the process that runs the program under test (plus_runner.py), a fresh interpreter
  per stage, as EvalPlus runs each stage in a process of its own.

This process holds the expected outputs, compares and reports; the candidate gets the program's
text and the inputs and returns plain values through a pipe. This process is not dumpable, so the
candidate (same user) can neither trace it nor read its memory or descriptors; all it can do to
this process is end it, which is no pass. The first failing input ends the run (EvalPlus's fast
check) with `BaseTestFailed` or `PlusTestFailed`, whose message says why: `wrong`, `error`,
`timed out` or `returned a non-builtin value`. Standard library only; runs with plus_values.py's
and plus_rules.py's text before it.
"""

import base64
import ctypes
import fcntl
import hashlib
import marshal
import os
import pickle
import select
import struct
import sys
import time

from quench.execution.plus_rules import check
from quench.execution.plus_values import as_simple, digest, non_value_type, wire

PR_SET_DUMPABLE = 4
GRACE_S = 0.5  # past an input's limit, the candidate's own alarm has had its chance: kill it
MAX_COMPARED_BYTES = 64 << 20  # an output compared as a value is read whole; larger ones are wrong
CHUNK = 1 << 20
CANDIDATE_FDS = (3, 4)  # plus_runner.IN_FD, OUT_FD
ABORT = 1 << 63  # plus_runner.ABORT


class BaseTestFailed(AssertionError):
    """An input of MBPP's own tests failed."""


class PlusTestFailed(AssertionError):
    """Every base input passed; an extra (plus) input failed."""


class Candidate:
    """The program under test in its own fresh interpreter, spoken to over two pipes."""

    def __init__(self, runner):
        to_child, from_parent = os.pipe()[::-1]
        from_child, to_parent = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            self._exec(runner, from_parent, to_parent)
        os.close(from_parent)
        os.close(to_parent)
        self.writer, self.reader = to_child, from_child

    @staticmethod
    def _exec(runner, from_parent, to_parent):
        try:  # the result pipe (fd 3) is replaced here: the candidate never holds it
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (from_parent, to_parent)]
            for target, fd in zip(CANDIDATE_FDS, high):
                os.dup2(fd, target)
            os.closerange(CANDIDATE_FDS[-1] + 1, 65536)
            os.execv(sys.executable, [sys.executable, "-s", "-P", "-c", runner])
        finally:
            os._exit(127)

    def send(self, value):
        data = pickle.dumps(value)
        try:
            view = memoryview(struct.pack(">Q", len(data)) + data)
            while view:
                view = view[os.write(self.writer, view):]
        except OSError:  # it has ended: the next read says so
            pass

    def wait_readable(self, seconds):
        return bool(select.select([self.reader], [], [], max(seconds, 0.0))[0])

    def read(self, size, keep=True, sink=None):
        """`size` bytes (None if the candidate ended first); `keep=False` only feeds `sink.add`."""
        data, left = bytearray(), size
        while left:
            chunk = os.read(self.reader, min(left, CHUNK))
            if not chunk:
                return None
            left -= len(chunk)
            if sink is not None:
                sink.add(chunk)
            if keep:
                data += chunk
        return bytes(data)

    def frame_header(self):
        header = self.read(8)
        return None if header is None else struct.unpack(">Q", header)[0]

    def frame(self):
        """One whole frame's bytes (None if the candidate ended first or sent an ABORT here)."""
        size = self.frame_header()
        return None if size is None or size > MAX_COMPARED_BYTES else self.read(size)

    def close(self):
        for fd in (self.writer, self.reader):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.pid > 0:
            os.kill(self.pid, 9)
            os.waitpid(self.pid, 0)
            self.pid = -1

    def ended(self):
        """Why the candidate stopped answering (it is killed if it still runs)."""
        self.close_writer()
        status = None
        for _ in range(50):
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                break
            time.sleep(0.01)
        else:
            return "error: the program stopped answering"
        self.pid = -1
        if os.WIFSIGNALED(status):
            return "error: the program was killed by signal " + str(os.WTERMSIG(status))
        return "error: the program exited with status " + str(os.WEXITSTATUS(status))

    def close_writer(self):
        try:
            os.close(self.writer)
        except OSError:
            pass


def load(candidate, source, entry_point, rule):
    """None once the program is loaded, else why it could not be."""
    candidate.send((source, entry_point, rule))
    message = candidate.frame()
    if message is None:
        return candidate.ended()
    if message[:1] == b"O":
        return None
    return "error: " + message[1:].decode("utf-8", "replace")


class Value:
    """A "V" answer read from the candidate: its size, raw digest, and its bytes up to `keep`."""

    def __init__(self, keep):
        self.keep, self.size, self.data, self.hasher = keep, 0, bytearray(), hashlib.sha256()

    def add(self, chunk):
        self.size += len(chunk)
        self.hasher.update(chunk)
        if self.size <= self.keep:
            self.data += chunk

    @property
    def kept(self):
        return self.size <= self.keep


def receive(candidate, keep):
    """(kind, Value or text) of one answer after its "R"; ("why", reason) if it ends first."""
    while True:
        kind = candidate.read(1)
        if kind is None:
            return "why", candidate.ended()
        if kind != b"V":
            text = candidate.frame()
            return ("why", candidate.ended()) if text is None else (kind, text.decode("utf-8", "replace"))
        value = Value(keep)
        while True:
            size = candidate.frame_header()
            if size is None:
                return "why", candidate.ended()
            if size == ABORT:
                break  # a kind byte starts the answer again
            if size == 0:
                return kind, value
            if candidate.read(size, keep=False, sink=value) is None:
                return "why", candidate.ended()


def judge_digest(value, raw, simple):
    """None if the answer equals the simple value whose wire forms have these digests, else why not."""
    if value.hasher.hexdigest() == raw:
        return None
    if not value.kept:
        return "wrong: an output of " + str(value.size) + " bytes"
    out, why = decoded(bytes(value.data))
    if why is not None:
        return why
    try:
        same = digest(wire(as_simple(out))) == simple
    except (ValueError, RecursionError):
        same = False
    return None if same else "wrong: got " + repr(out)[:80]


def decoded(data):
    """(the plain value in `data`, None), or (None, why it is not one)."""
    try:
        out = marshal.loads(data)
    except Exception:  # the candidate wrote these bytes: anything may be wrong with them
        return None, "wrong: an output that does not decode"
    kind = non_value_type(out)
    return (out, None) if kind is None else (None, "returned a non-builtin value (" + kind + ")")


def judge_input(candidate, args, expected, limit, atol, rule):
    """(None if the input passes else why not, the stage's atol from now on)."""
    candidate.send((args, limit))
    if not candidate.wait_readable(limit + GRACE_S):
        return "timed out after " + format(limit, "g") + " s", atol
    if candidate.read(1) is None:
        return candidate.ended(), atol
    kind, answer = receive(candidate, MAX_COMPARED_BYTES)
    if kind == "why":
        return answer, atol
    if kind == b"T":
        return "timed out after " + format(limit, "g") + " s", atol
    if kind == b"N":
        return "returned a non-builtin value (" + answer + ")", atol
    if kind != b"V":
        return "error: " + answer, atol
    if expected[0] == "d":
        return judge_digest(answer, expected[1], expected[2]), atol
    if not answer.kept:
        return "wrong: an output of " + str(answer.size) + " bytes", atol
    out, why = decoded(bytes(answer.data))
    if why is not None:
        return why, atol
    passed, atol = check(out, expected[1], args, atol, rule)
    return (None if passed else "wrong: got " + repr(out)[:80]), atol


def judge_stage(runner, source, entry_point, cases, atol, rule):
    """(index, why) of the stage's first failing input, else None."""
    candidate = Candidate(runner)
    try:
        why = load(candidate, source, entry_point, rule)
        if why is not None:
            return 0, why
        for index, (args, expected, limit) in enumerate(cases):
            why, atol = judge_input(candidate, args, expected, limit, atol, rule)
            if why is not None:
                return index, why
        return None
    finally:
        candidate.close()


def run_tests(source, entry_point, runner, blob, stages):
    """Judge the program `source` on every input of `stages` (in order) packed in `blob`."""
    tests = pickle.loads(base64.b85decode(blob))
    ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    for stage in stages:
        cases = tests[stage]
        if not cases:
            continue
        failed = judge_stage(runner, source, entry_point, cases, tests["atol"], tests["rule"])
        if failed is not None:
            index, why = failed
            error = BaseTestFailed if stage == "base" else PlusTestFailed
            raise error(stage + " input " + str(index + 1) + " of " + str(len(cases)) + " " + why)
