"""The MBPP+ candidate's process: a fresh interpreter that runs the program and sends back plain values.

The harness (plus_harness.py) starts it with `python -s -P -c <this script>` after a fork, so it
holds none of the harness's memory: no expected output, no comparison, no reporter. It reads the
program's text and each input from fd IN_FD and writes to fd OUT_FD; it never decides a verdict,
so nothing the program does here, patching this script included, can pass an input the program
does not answer.

Protocol (a frame is an 8-byte big-endian length, then that many bytes):
- in: a pickled (source, entry point, rule), then one pickled (args, limit) per input. Where the
  rule compares only whether a match was found (plus_rules.py, "not_none"), a non-bool output is
  sent as `out is not None`; where every output passes ("any"), as True.
- out: after loading, a frame "O", or "E" + message; per input, the byte "R" as soon as the call
  returns or raises, then a kind byte and its frames: "V" and the value's wire form, BATCH items
  a frame, ended by an empty frame; "X" and the error; "T" and an empty frame (its own alarm
  fired); "N" and the name of a type that is not a plain value (plus_values.py). A "V" that
  marshal refuses part way ends with an ABORT length instead, and a kind byte starts again.
Standard library only; runs with plus_values.py's text before it.
"""

import os
import pickle
import signal
import struct

from quench.execution.plus_values import non_value_type, wire_chunks, with_plain_mappings

IN_FD, OUT_FD = 3, 4
ABORT = 1 << 63  # a frame length that ends a value part way
MESSAGE_CHARS = 100


class InputTimedOut(Exception):
    """Raised by the alarm when a call runs past its input's limit (EvalPlus's time_limit)."""


def _alarm(signum, frame):
    raise InputTimedOut()


def read_frame():
    header = _read(8)
    return None if header is None else _read(struct.unpack(">Q", header)[0])


def _read(size):
    data = bytearray()
    while len(data) < size:
        chunk = os.read(IN_FD, min(size - len(data), 1 << 20))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def send(data):
    view = memoryview(struct.pack(">Q", len(data)) + data)
    while view:
        view = view[os.write(OUT_FD, view):]


def error_text(exc):
    return (type(exc).__name__ + ": " + str(exc))[:MESSAGE_CHARS]


def call(function, args, limit):
    """The call's outcome under its time limit: ("V", value), ("X", error) or ("T", None)."""
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        return b"V", function(*args)
    except InputTimedOut:
        return b"T", None
    except BaseException as exc:  # SystemExit and KeyboardInterrupt too: the input failed
        return b"X", error_text(exc)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        os.write(OUT_FD, b"R")


def send_value(out):
    """The "V" reply: `out`'s wire form in frames (a standard mapping goes as a dict), or "N"."""
    name = non_value_type(out)
    if name is not None:
        out = with_plain_mappings(out)
        name = non_value_type(out)
    if name is not None:
        os.write(OUT_FD, b"N")
        send(name.encode("utf-8", "replace"))
        return
    os.write(OUT_FD, b"V")
    try:
        for chunk in wire_chunks(out):
            send(chunk)
    except (ValueError, TypeError):  # what marshal refuses all the same
        os.write(OUT_FD, struct.pack(">Q", ABORT) + b"N")
        send(b"a value marshal refuses")
        return
    send(b"")


def reply(kind, result):
    if kind == b"V":
        send_value(result)
        return
    os.write(OUT_FD, kind)
    send(b"" if result is None else result.encode("utf-8", "replace"))


def main():
    source, entry_point, rule = pickle.loads(read_frame())
    namespace = {"__name__": "__quench_program__"}  # not "__main__": a program's own demo code stays unrun
    try:
        exec(compile(source, "<program>", "exec"), namespace)
        function = namespace[entry_point]
    except BaseException as exc:
        send(b"E" + error_text(exc).encode("utf-8", "replace"))
        return
    send(b"O")
    signal.signal(signal.SIGALRM, _alarm)
    while True:
        frame = read_frame()
        if frame is None:
            return
        args, limit = pickle.loads(frame)
        kind, result = call(function, args, limit)
        if kind == b"V" and rule == "not_none" and type(result) is not bool:
            result = result is not None
        elif kind == b"V" and rule == "any":
            result = True
        reply(kind, result)


if __name__ == "__main__":
    main()
