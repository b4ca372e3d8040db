"""The JavaScript host: each sandbox worker keeps one warm node that runs every JavaScript program
it can in a fresh V8 context. A program ends as under plain `node main.js` (outcome, error text),
one that may use what a context lacks is declined and runs under plain node, nothing of one program
reaches the next, and no program reaches the host.

Runs in "bwrap" mode (the pool tests) or as a plain process (the host's own answers); skipped
where the machine has no node with lodash.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest
from sandbox_helpers import is_node_host, process_tree, skip_reason

from quench.datasets import Problem, load_benchmark
from quench.datasets.languages import HOST_MARK, launcher
from quench.execution import ExecutionResult, Outcome, SandboxLimits, SandboxPool
from quench.execution import sandbox as sandbox_module
from quench.execution import toolchains
from quench.execution.node_host import NodeHost
from quench.execution.toolchains import (
    ENV_VAR,
    has_toolchain,
    host_command,
    node_env,
    node_host_script,
    prepare_node_host,
    prepare_node_snapshot,
)

PROBLEMS = 40  # MBJSP test problems with a reference whose verdicts are compared (all 483: the same)
# How programs end, each to be told apart the same way with and without the host. The first seven
# run in the host, the others are declined and start node.
ENDINGS = {
    "passes": "const _ = require('lodash');\nif (!_.isEqual([{a: [1]}], [{a: [1]}])) { throw 'unequal'; }\n",
    "throws an Error": "function f() { throw new Error('wrong answer'); }\nf();\n",
    "throws a string": "throw 'Error at 1th assert statement. Value = ' + JSON.stringify(x);\n",
    "overflows the stack": "function f(n) { return f(n + 1) + 1; }\nf(0);\n",
    "does not parse JSON": "JSON.parse('{');\n",
    "does not parse": "function (\n",
    "prints and passes": "console.log('a'.repeat(100)); console.error('b');\n",
    "exits 3": "process.exit(3);\n",
    "sets exitCode": "setTimeout(() => { process.exitCode = 2; }, 5);\n",
    "rejects": "Promise.reject(new TypeError('rejected'));\n",
    "throws later": "setTimeout(() => { null.x; }, 1);\n",
}
OUTCOMES = [Outcome.passed] + [Outcome.failed] * 4 + [Outcome.compile_error, Outcome.passed] + [Outcome.failed] * 4
DECLINED = {
    "process.stdout.write('x');": "process",
    "setTimeout(() => {}, 1);": "setTimeout",
    "require('fs').writeFileSync('x', 'y');": "a module other than lodash",
    "const { isEqual } = require(`lodash`);": "a module other than lodash",
    "module.paths.push('/x');": "module",
    "new Promise(() => {});": "Promise",
    "async function f() {}": "async",
    "eval('1');": "eval",
    "globalThis.x = 1;": "globalThis",
    "(() => {}).constructor('return 1')();": "constructor",
    "({})['constructor'];": "constructor",
    "try { null.x } catch (e) { e.stack.length; }": "stack",
    "const o = { get stack() { return 1; } };": "stack",
    "Buffer.from('x');": "Buffer",
    "\\u0070rocess.exit(0);": "unicode escape",
}
RUN = (
    "class Stack { constructor() { this.items = []; } }\nconst stack = new Stack();\nstack.items.push(1);\n",
    "const _ = require(\"lodash\");\nmodule.exports = _.sum([1, 2]);\n",
    "var total = 0;\nfor (const n of [1, 2, 3]) { total += n; }\nif (total !== 6) { throw 'sum'; }\n",
)


def needs_node() -> None:
    if not has_toolchain("javascript"):
        pytest.skip("no node with lodash here")


def needs_sandbox() -> None:
    reason = skip_reason("bwrap")
    if reason is not None:
        pytest.skip(reason)
    needs_node()


@pytest.fixture(scope="module")
def script() -> Path:
    needs_node()
    prepare_node_snapshot()
    kept = prepare_node_host()
    assert kept is not None, "the JavaScript host failed its check"
    return kept


@pytest.fixture(scope="module")
def host(script: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NodeHost, Path]]:
    """The host as a plain process (no sandbox), with a one-second time limit, and a scratch directory."""
    argv, extra = host_command(script)
    null = os.open(os.devnull, os.O_RDWR)
    started = NodeHost([*argv, "1000"], {**node_env(), **extra}, null)
    assert started.ensure()
    yield started, tmp_path_factory.mktemp("host")
    started.stop()
    os.close(null)


def ask(host: tuple[NodeHost, Path], program: str) -> dict[str, object]:
    runner, scratch = host
    (scratch / "main.js").write_text(program, encoding="utf-8")
    ident = uuid.uuid4().hex
    request = {"id": ident, "cwd": str(scratch), "main": "main.js", "stderr": str(scratch / "run.log")}
    answer = runner.request(request, time.monotonic() + 30)
    assert answer is not None and answer.pop("id") == ident
    return answer


@pytest.fixture(scope="module")
def pool(script: Path) -> Iterator[SandboxPool]:
    needs_sandbox()
    with SandboxPool(1, SandboxLimits(timeout_s=3.0), isolation="bwrap") as sandbox:
        yield sandbox


def whole(text: str) -> str:
    return Problem("js", "", text, "", "main", language="javascript").reference_program()


def host_pids(pool: SandboxPool) -> list[int]:
    return [pid for worker in pool.worker_pids() for pid in process_tree(worker) if is_node_host(pid)]


def test_the_host_is_named_after_its_source(script: Path) -> None:
    assert script == node_host_script() and script.is_file()
    assert script.read_text(encoding="utf-8") == Path(toolchains.__file__).with_name("node_host.js").read_text()
    assert prepare_node_host() == script  # checked once: the second call finds it


@pytest.mark.parametrize("program", list(DECLINED))
def test_the_host_declines_what_a_context_cannot_do_as_node(host: tuple[NodeHost, Path], program: str) -> None:
    answer = ask(host, program)
    assert DECLINED[program] in str(answer.get("declined")), answer


@pytest.mark.parametrize("program", RUN)
def test_the_host_runs_what_names_nothing_of_node(host: tuple[NodeHost, Path], program: str) -> None:
    assert ask(host, program) == {"status": 0}


def test_the_host_tells_a_syntax_error_and_a_timeout(host: tuple[NodeHost, Path]) -> None:
    assert ask(host, "function (") == {"status": 1, "syntax": True}
    assert "SyntaxError" in (host[1] / "run.log").read_text(encoding="utf-8")
    assert ask(host, "JSON.parse('{');") == {"status": 1}  # a syntax error at run time is a failure
    assert ask(host, "for (;;) {}") == {"timeout": True}
    assert ask(host, "throw { toString() { for (;;) {} } };") == {"status": 1}  # its text is not waited for


def test_a_program_finds_nothing_of_the_host(host: tuple[NodeHost, Path]) -> None:
    # The global object, reached without naming it, holds JavaScript's globals only; its prototype
    # chain is the context's own.
    probe = ("var g = (function () { return this; })();\nvar names = ['pro' + 'cess', 'Buf' + 'fer', 're' + 'quire'];\n"
             "if (names.some((n) => g[n] !== undefined)) { throw 'found'; }\n"
             "var last = g;\nwhile (Object.getPrototypeOf(last) !== null) { last = Object.getPrototypeOf(last); }\n"
             "if (last !== Object.prototype) { throw 'a prototype of another realm'; }\n")
    assert ask(host, probe) == {"status": 0}


def test_nothing_of_one_program_reaches_the_next(host: tuple[NodeHost, Path]) -> None:
    spoil = "const _ = require('lodash');\n_.isEqual = () => true;\nspoiled = 1;\nArray.prototype.spoiled = 1;\n"
    check = ("const _ = require('lodash');\n"
             "if (_.isEqual(1, 2) || typeof spoiled !== 'undefined' || [].spoiled) { throw 'spoiled'; }\n")
    assert [ask(host, program) for program in (check, spoil, check)] == [{"status": 0}] * 3


def test_programs_run_in_one_warm_node(pool: SandboxPool) -> None:
    [passed] = pool.run_many([whole(ENDINGS["passes"])])
    assert passed.outcome is Outcome.passed, passed.detail
    first = host_pids(pool)
    assert len(first) == 1
    pool.run_many([whole(ENDINGS["passes"]), whole(ENDINGS["exits 3"])])
    assert host_pids(pool) == first


def run_without_host(monkeypatch: pytest.MonkeyPatch, programs: list[str]) -> list[ExecutionResult]:
    monkeypatch.setenv(sandbox_module.HOST_VAR, "0")
    with SandboxPool(1, SandboxLimits(timeout_s=3.0), isolation="bwrap") as plain:
        return plain.run_many(programs)


def last_line(detail: str) -> str:
    return detail.split("\n    at ")[0].strip().splitlines()[-1]


def test_every_ending_is_that_of_plain_node(pool: SandboxPool, monkeypatch: pytest.MonkeyPatch) -> None:
    programs = [whole(text) for text in ENDINGS.values()]
    hosted = pool.run_many(programs)
    plain = run_without_host(monkeypatch, programs)
    for name, a, b in zip(ENDINGS, hosted, plain):
        assert a.outcome is b.outcome, (name, a.detail, b.detail)
        if a.outcome is not Outcome.passed:
            assert last_line(a.detail) == last_line(b.detail), name  # node adds a hint or frames
    assert [result.outcome for result in hosted] == OUTCOMES
    assert "main.js:1\n" in hosted[1].detail and "throw new Error('wrong answer')" in hosted[1].detail


@pytest.mark.slow
def test_mbjsp_verdicts_in_the_host_are_those_of_plain_starts(pool: SandboxPool, monkeypatch: pytest.MonkeyPatch) -> None:
    problems = [problem for problem in load_benchmark("mbjsp") if problem.canonical_solution][:PROBLEMS]
    programs = [problem.reference_program() for problem in problems]
    programs += [problem.program("    throw new Error('wrong');\n}\n") for problem in problems]
    programs += [problem.program("    return (;\n}\n") for problem in problems[:10]]
    hosted = [result.outcome for result in pool.run_many(programs)]
    assert hosted == [result.outcome for result in run_without_host(monkeypatch, programs)]
    assert hosted.count(Outcome.passed) >= len(problems) * 4 // 5 and hosted.count(Outcome.compile_error) == 10


def test_a_program_that_runs_past_its_limit_leaves_the_host_serving(pool: SandboxPool) -> None:
    pool.run_many([whole(ENDINGS["passes"])])
    before = host_pids(pool)
    looping, good = pool.run_many([whole("for (;;) {}\n"), whole(ENDINGS["passes"])])
    assert looping.outcome is Outcome.timeout, looping.detail
    assert good.outcome is Outcome.passed, good.detail
    assert host_pids(pool) == before


def test_a_program_whose_own_limit_outlasts_the_hosts_runs_to_its_end(pool: SandboxPool) -> None:
    # The host stops a program at the pool's limit (3 s); a calibrated limit above it starts node.
    busy = whole("const end = Date.now() + 3800;\nwhile (Date.now() < end) {}\n")
    [result] = pool.run_many([busy], timeouts=[8.0])
    assert result.outcome is Outcome.passed, result.detail


def test_a_program_that_stops_or_kills_the_host_harms_no_other(pool: SandboxPool) -> None:
    # A Python program with the mark gets the host's pipes; it signals the host directly (refused
    # where Landlock scopes signals; elsewhere the host is resumed or restarted).
    for signal_name in ("SIGSTOP", "SIGKILL"):
        hostile = (HOST_MARK + "import os, signal\nfor pid in filter(str.isdigit, os.listdir('/proc')):\n"
                   "    argv = open(f'/proc/{pid}/cmdline', 'rb').read().split(b'\\0')\n"
                   "    if len(argv) > 1 and argv[1].endswith(b'node_host.js'):\n"
                   f"        try:\n            os.kill(int(pid), signal.{signal_name})\n"
                   "        except PermissionError:\n            pass\n")
        left, good = pool.run_many([hostile, whole(ENDINGS["passes"])])
        assert left.outcome is Outcome.passed, left.detail
        assert good.outcome is Outcome.passed, good.detail
        assert len(host_pids(pool)) == 1


def test_requests_a_program_leaves_behind_never_run_the_next_program(pool: SandboxPool) -> None:
    # A Python program with the mark gets the host's pipes: it stops the host, queues runs of
    # main.js in the working directory (where the next program's will be) and exits unanswered.
    leave = (HOST_MARK + "import json, os, signal\n"
             "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
             "    argv = open(f'/proc/{pid}/cmdline', 'rb').read().split(b'\\0')\n"
             "    if len(argv) > 1 and argv[1].endswith(b'node_host.js'):\n"
             "        try:\n            os.kill(int(pid), signal.SIGSTOP)\n"
             "        except PermissionError:\n            pass\n"
             "for n in range(40):\n"
             "    os.write(4, (json.dumps({'id': n, 'cwd': os.getcwd(), 'main': 'main.js', 'stderr': '/dev/null'})"
             " + '\\n').encode())\n")
    once = "require('fs').writeFileSync('/tmp/ran', 'x', {flag: 'wx'});  // throws if this program ran before\n"
    left, good = pool.run_many([leave, whole(once)])
    assert left.outcome is Outcome.passed, left.detail
    assert good.outcome is Outcome.passed, good.detail


def test_a_host_that_fails_its_check_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    needs_node()
    cache = Path.home() / ".cache" / "quench" / f"test-toolchains-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv(ENV_VAR, str(cache))
    checks = (*toolchains.HOST_CHECKS, ("throw 'x';", {"status": 0}))  # an answer the host must not give
    monkeypatch.setattr(toolchains, "HOST_CHECKS", checks)
    try:
        assert prepare_node_host() is None
        assert not list((cache / "javascript").glob("host-*"))
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def test_only_javascript_launchers_carry_the_mark() -> None:
    assert launcher("javascript", "").startswith(HOST_MARK)
    assert not any(launcher(language, "").startswith(HOST_MARK) for language in ("go", "cpp", "java"))


HOSTILE_JS = Path(__file__).with_name("fixtures") / "hostile_js"


def hostile_program(name: str) -> str:
    """A hostile program of fixtures/hostile_js, the prelude (its `pwn`) first, comments dropped (they
    name what the host declines)."""
    def code(path: Path) -> str:
        return "".join(line for line in path.read_text(encoding="utf-8").splitlines(True)
                       if not line.lstrip().startswith("//"))
    return code(HOSTILE_JS / "_prelude.js") + code(HOSTILE_JS / name)


HOSTILE = sorted(path.name for path in HOSTILE_JS.glob("[!_]*.js"))
# What each hostile program itself gets from the host: it runs there (none is declined) and ends as its
# own code says, whatever it tried on the host.
HOSTILE_ANSWERS = {
    "atomics_wait.js": {"timeout": True},
    "builtins_override.js": {"status": 1},
    "constructor_climbs.js": {"status": 0},  # every climb fails, or it throws
    "crawl.js": {"status": 0},
    "dynamic_import.js": {"status": 1},  # code generation from strings is off: eval throws
    "microtasks_forever.js": {"timeout": True},
    "module_values.js": {"status": 0},
    "prepare_stack_trace.js": {"status": 1},
    "promise_hijack.js": {"status": 0},
    "setter_on_global.js": {"status": 1},
    "thrown_getters.js": {"status": 1},
    "thrown_proxy.js": {"status": 1},
}
AFTER_HOSTILE = (("throw new Error('wrong');", {"status": 1}), ("function (", {"status": 1, "syntax": True}),
                 ("const _ = require('lodash'); if (!_.isEqual([1], [1])) throw 'x';", {"status": 0}))


def test_every_hostile_program_has_its_expected_answer() -> None:
    assert sorted(HOSTILE_ANSWERS) == HOSTILE


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_program_changes_no_later_answer(host: tuple[NodeHost, Path], name: str) -> None:
    # Each tries to reach the host's realm (and make every later answer "passed") through what the
    # host hands over, formats, converts or runs after it; the answers after it are those of plain node.
    assert ask(host, hostile_program(name)) == HOSTILE_ANSWERS[name]
    assert [ask(host, program) for program, _ in AFTER_HOSTILE] == [answer for _, answer in AFTER_HOSTILE]
