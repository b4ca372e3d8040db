"""A Python problem's program: the tests run in a judge process, the sample in a fresh interpreter.

The sandbox runs the judge (this module's JUDGE with the problem filled in). The judge starts
the *runner*, a fresh Python interpreter (exec'd: nothing of the judge's memory, the test's text
or the sandbox's completion record is in it), on two pipes that replace its descriptors 3 and 4,
so the sandbox's result pipe is not among them. The runner executes `prompt + completion` and
then only answers calls: the judge runs the problem's `test` and `check(candidate)` in its own
process, where `candidate` (and every other name of the program's that the test uses) is a proxy
that sends the arguments to the runner and receives the return value. Both ways a value crosses
as plain values only (None, bool, int, float, complex, str, bytes and list, tuple, dict, set,
frozenset of them, exact types, at any depth); a return value of any other type, a subclass of
`int` or an object with its own `__eq__` included, ends the run as `lying_value`, naming the
type. The judge is not dumpable (the sandbox's fork server is not, and the judge only forks), so
the runner can neither read its memory nor reach its descriptors; the comparison, the expected
values and the completion record stay out of the program's reach.

The runner's end mirrors into the judge's: an exit (status N, or a signal) before the tests
finished ends the judge the same way, and SystemExit and MemoryError are raised again in the
judge, so outcomes are as when the program ran in-process. Lists, dicts and sets passed as
arguments come back as the call left them, for tests that check a function's effect on its input.
"""

from __future__ import annotations

import ast
import builtins
import functools

VALUES = r'''
import builtins, os, sys

TYPES = {kind.__name__: kind for kind in (int, float, complex, str, bytes, bool, list, tuple, dict, set, frozenset)}
DICTS = ("Counter", "defaultdict", "OrderedDict")  # the standard library's dicts: compared as dicts
SEQUENCES = {list: "l", tuple: "t", set: "s", frozenset: "z"}
BUILDS = {tag: kind for kind, tag in SEQUENCES.items()}


class LyingValue(BaseException):  # not an Exception: a test's `except Exception` cannot swallow it
    pass


def form(value, depth=0):
    # The form of a plain value; LyingValue naming the first type that is not one.
    kind = type(value)
    if depth > 100:
        raise LyingValue("value nested more than 100 levels deep")
    if value is None or kind is bool:
        return value
    if kind is str:
        return {"u": value.encode("utf-8", "surrogatepass").hex()}
    if kind is int:
        return {"i": hex(value)}
    if kind is float:
        return {"f": value.hex()}
    if kind is complex:
        return {"c": [value.real.hex(), value.imag.hex()]}
    if kind is bytes:
        return {"b": value.hex()}
    if kind in SEQUENCES:
        return {SEQUENCES[kind]: [form(item, depth + 1) for item in value]}
    if kind is dict or (kind.__module__ == "collections" and kind.__qualname__ in DICTS and dict in kind.__mro__):
        return {"d": [[form(key, depth + 1), form(item, depth + 1)] for key, item in dict.items(value)]}
    if kind is type and value.__name__ in TYPES and TYPES[value.__name__] is value:
        return {"y": value.__name__}
    raise LyingValue(f"{kind.__module__}.{kind.__qualname__}")


def value(shape):
    # The plain value of a form (ValueError for anything else).
    if shape is None or type(shape) is bool:
        return shape
    if type(shape) is not dict or len(shape) != 1:
        raise ValueError("not a plain value's form")
    (tag, body), = shape.items()
    if tag in BUILDS:
        return BUILDS[tag]([value(item) for item in body])
    if tag == "d":
        return {value(key): value(item) for key, item in body}
    if tag == "y":
        return TYPES[body]
    if tag == "c":
        return complex(float.fromhex(body[0]), float.fromhex(body[1]))
    if type(body) is not str:
        raise ValueError("not a plain value's form")
    return {"u": lambda: bytes.fromhex(body).decode("utf-8", "surrogatepass"), "i": lambda: int(body, 16),
            "f": lambda: float.fromhex(body), "b": lambda: bytes.fromhex(body)}[tag]()


def send(fd, data):
    view = memoryview(len(data).to_bytes(4, "big") + data)
    while view:
        view = view[os.write(fd, view):]


def read_exact(fd, size):
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def receive(fd):
    header = read_exact(fd, 4)
    return None if header is None else read_exact(fd, int.from_bytes(header, "big"))
'''


RUNNER = r"""
def text(shape):
    # A form's JSON text (its strings are tags and hex digits: nothing to escape).
    if shape is None or type(shape) is bool:
        return {None: "null", True: "true", False: "false"}[shape]
    if type(shape) is str:
        return '"' + shape + '"'
    if type(shape) is list:
        return "[" + ",".join([text(item) for item in shape]) + "]"
    (tag, body), = shape.items()
    return '{"' + tag + '":' + text(body) + "}"


def reply(*message):
    send(4, ("[" + ",".join(message) + "]").encode())


def raised(exc):
    try:
        return text({"u": type(exc).__name__.encode().hex()}), text({"u": str(exc)[-300:].encode("utf-8", "surrogatepass").hex()})
    except BaseException:
        return text({"u": "457863657074696f6e"}), text({"u": ""})


def describe(name, namespace):
    # What the program's `name` is to the judge: absent, a module, a function to call, or a value.
    if name not in namespace:
        return '["absent"]'
    found = namespace[name]
    if type(found) is type(os):
        return '["module",' + text({"u": found.__name__.encode().hex()}) + "]"
    if callable(found) and type(found) is not type:
        return '["call"]'
    try:
        return '["value",' + text(form(found)) + "]"
    except LyingValue as exc:
        return '["lying",' + text({"u": str(exc).encode().hex()}) + "]"


def call(namespace, request):
    try:
        args = [value(arg) for arg in request[2]]
        result = namespace[request[1]](*args, **{key: value(arg) for key, arg in request[3]})
        after = [text(form(arg)) if type(arg) in (list, dict, set) else "null" for arg in args]
        reply('"return"', text(form(result)), "[" + ",".join(after) + "]")
    except SystemExit as exc:
        reply('"exit"', text({"u": str(exc.code).encode().hex()}))
        os._exit(0)
    except LyingValue as exc:
        reply('"lying"', text({"u": str(exc).encode().hex()}))
    except BaseException as exc:
        reply('"raise"', *raised(exc))


def serve():
    # Run the program, then answer the judge's requests until it closes the pipe.
    import marshal
    sys.path[:] = marshal.loads(receive(3))
    namespace = {"__name__": "__quench_program__", "__builtins__": builtins}
    try:
        exec(compile(marshal.loads(receive(3)), "<program>", "exec"), namespace)
    except SystemExit as exc:
        reply('"exit"', text({"u": str(exc.code).encode().hex()}))
        os._exit(0)
    except BaseException as exc:
        reply('"raise"', *raised(exc))
        os._exit(0)
    reply('"ready"')
    while (data := receive(3)) is not None:
        request = marshal.loads(data)
        if request[0] == "names":
            reply(*[describe(name, namespace) for name in request[1]])
        else:
            call(namespace, request)


serve()
os._exit(0)
"""

JUDGING = r"""
import json, marshal, signal


class ProgramSyntaxError(Exception):
    pass


def start_runner():
    # The runner's pid and the judge's ends of its pipes: its fd 3 (requests) and fd 4 (replies).
    calls_r, calls_w = os.pipe()
    results_r, results_w = os.pipe()
    high = [os.dup(fd) if fd > 4 else above(fd) for fd in (calls_r, results_w)]
    pid = os.fork()
    if pid == 0:
        try:
            os.dup2(high[0], 3)  # the sandbox's result pipe goes
            os.dup2(high[1], 4)
            os.execv(sys.executable, [sys.executable, "-S", "-c", RUNNER_TEXT])
        finally:
            os._exit(125)
    for fd in {calls_r, results_w, *high}:
        os.close(fd)
    return pid, calls_w, results_r


def above(fd):
    # `fd` duplicated above 4 (the runner's dup2 targets are 3 and 4); `fd` itself stays open.
    held = []
    while fd <= 4:
        held.append(fd)
        fd = os.dup(fd)
    for low in held[1:]:
        os.close(low)
    return fd


def end_as(pid):
    # The runner ended before the tests did: end the same way (its exit status or signal).
    status = os.waitpid(pid, 0)[1]
    if os.WIFSIGNALED(status):
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status))


def answer(runner, data):
    # The reply the runner's message stands for, or its exception raised here.
    if data is None:
        end_as(runner)
    message = json.loads(data)
    if type(message) is not list or not message:
        raise ValueError("a malformed reply from the program's process")
    kind = message[0]
    if kind == "exit":
        raise SystemExit(value(message[1]))
    if kind == "lying":
        raise LyingValue(f"the program returned a {value(message[1])}, not a builtin value type")
    if kind == "raise":
        name, text = value(message[1]), value(message[2])
        error = getattr(builtins, name, None)
        if isinstance(error, type) and issubclass(error, BaseException) and error not in (SystemExit, LyingValue):
            raise error(text)
        raise Exception(f"{name}: {text}")
    return message


def proxy(runner, calls, results, name):
    def call(*args, **kwargs):
        send(calls, marshal.dumps(["call", name, [form(arg) for arg in args], [[key, form(arg)] for key, arg in kwargs.items()]]))
        message = answer(runner, receive(results))
        for arg, after in zip(args, message[2]):  # what the call left in a list, dict or set it was passed
            if after is not None and type(arg) in (list, dict, set):
                arg.clear()
                (arg.extend if type(arg) is list else arg.update)(value(after))
        return value(message[1])
    call.__name__ = name
    return call


def judge():
    try:
        compile(PROGRAM, "<program>", "exec")
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None)
        raise ProgramSyntaxError(f"{type(exc).__name__}: {getattr(exc, 'msg', exc)}" + (f" (line {line})" if line else ""))
    runner, calls, results = start_runner()
    send(calls, marshal.dumps(sys.path))
    send(calls, marshal.dumps(PROGRAM))
    answer(runner, receive(results))
    send(calls, marshal.dumps(["names", list(NAMES)]))
    namespace = {"__name__": "__quench_test__"}
    for name, (kind, *rest) in zip(NAMES, answer(runner, receive(results))):
        if kind == "module":
            namespace[name] = __import__(value(rest[0]), fromlist=["_"])
        elif kind == "call":
            namespace[name] = proxy(runner, calls, results, name)
        elif kind == "value":
            namespace[name] = value(rest[0])
        elif kind == "lying":
            raise LyingValue(f"the program's {name} is a {value(rest[0])}, not a builtin value type")
    exec(compile(TEST, "<program>", "exec"), namespace)
    namespace["check"](namespace[ENTRY])
    os.close(calls)
    os.close(results)


judge()
"""


def free_names(test: str, entry_point: str) -> list[str]:
    """Names the test reads but neither defines nor gets from builtins, and the entry point."""
    return list(_free_names(test, entry_point))


@functools.lru_cache(maxsize=4096)
def _free_names(test: str, entry_point: str) -> tuple[str, ...]:
    """free_names, kept per test: every sample of a problem, and every variant of it, runs the same test."""
    try:
        tree = ast.parse(test)
    except SyntaxError:
        return (entry_point,)
    read = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
    bound = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load)}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return tuple(sorted((read - bound - set(dir(builtins))) | {entry_point}))


def judge_program(program: str, test: str, entry_point: str) -> str:
    """The program the sandbox runs for `program` (prompt + completion) under `test`'s `check`."""
    filled = (f"PROGRAM = {program!r}\nTEST = {test!r}\nENTRY = {entry_point!r}\n"
              f"NAMES = {free_names(test, entry_point)!r}\nRUNNER_TEXT = {VALUES + RUNNER!r}\n")
    # compiled under a name of its own: an error's line is then the test's (quench.execution.outcomes)
    return f"{filled}exec(compile({VALUES + JUDGING!r}, '<quench judge>', 'exec'))\n"
