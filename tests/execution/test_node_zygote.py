"""The JavaScript zygote: each sandbox worker keeps one warm node that forks every JavaScript
program's run. A program ends as under plain `node main.js` (status, error text), nothing of one
program reaches the next, and a program that kills, stops or misuses the zygote harms no other.

Runs in "bwrap" mode; skipped where the machine has no node with lodash or no C compiler.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Iterator

import pytest
from sandbox_helpers import is_zygote, process_tree, skip_reason

from quench.datasets import Problem, load_benchmark
from quench.datasets.languages import ZYGOTE_MARK, launcher
from quench.execution import ExecutionResult, Outcome, SandboxLimits, SandboxPool
from quench.execution import sandbox as sandbox_module
from quench.execution import toolchains
from quench.execution.toolchains import ENV_VAR, has_toolchain, node_zygote_files, prepare_node_snapshot, prepare_node_zygote

PROBLEMS = 40  # MBJSP test problems with a reference whose verdicts are compared (all 483: the same)
# How programs end, each to be told apart the same way with and without the zygote.
ENDINGS = {
    "passes": "const _ = require('lodash');\nif (!_.isEqual([{a: [1]}], [{a: [1]}])) { process.exit(3); }\n",
    "throws an Error": "function f() { throw new Error('wrong answer'); }\nf();\n",
    "throws a string": "throw 'Error at 1th assert statement. Value = ' + JSON.stringify(x);\n",
    "exits 3": "process.exit(3);\n",
    "sets exitCode": "setTimeout(() => { process.exitCode = 2; }, 5);\n",
    "exit listener": "process.on('exit', () => { process.exitCode = 5; });\n",
    "rejects": "Promise.reject(new TypeError('rejected'));\n",
    "throws later": "setTimeout(() => { null.x; }, 1);\n",
    "does not parse": "function (\n",
    "prints and passes": "console.log('a'.repeat(100)); console.error('b');\n",
}


def needs_zygote() -> None:
    reason = skip_reason("bwrap")
    if reason is not None:
        pytest.skip(reason)
    if not has_toolchain("javascript") or toolchains.c_compiler() is None:
        pytest.skip("no node with lodash, or no C compiler, here")


@pytest.fixture(scope="module")
def zygote() -> Path:
    needs_zygote()
    prepare_node_snapshot()
    directory = prepare_node_zygote()
    assert directory is not None, "the JavaScript zygote did not build or failed its check"
    return directory


@pytest.fixture(scope="module")
def pool(zygote: Path) -> Iterator[SandboxPool]:
    with SandboxPool(1, SandboxLimits(timeout_s=6.0), isolation="bwrap") as sandbox:
        yield sandbox


def whole(text: str) -> str:
    return Problem("js", "", text, "", "main", language="javascript").reference_program()


def zygote_pid(pool: SandboxPool) -> str:
    """The pid (in the sandbox) of the node that forked the program: a failing program reports it."""
    [result] = pool.run_many([whole("throw new Error(['parent', process.ppid, ...process.execArgv].join('='));\n")])
    assert "parent=" in result.detail and "=--single-threaded" in result.detail, result.detail
    return result.detail.split("parent=")[1].split("=")[0]


def test_the_zygote_is_named_after_its_sources(zygote: Path) -> None:
    library, script = node_zygote_files()
    assert library.parent == zygote and library.is_file() and script.is_file()
    assert script.read_text(encoding="utf-8") == Path(toolchains.__file__).with_name("node_zygote.js").read_text()
    assert prepare_node_zygote() == zygote  # built once: the second call finds it


def test_programs_are_forked_from_one_warm_node(pool: SandboxPool) -> None:
    first = zygote_pid(pool)
    [passed] = pool.run_many([whole(ENDINGS["passes"])])
    assert passed.outcome is Outcome.passed, passed.detail
    assert zygote_pid(pool) == first


def test_a_worker_keeps_one_zygote(zygote: Path) -> None:
    with SandboxPool(2, SandboxLimits(timeout_s=6.0), isolation="bwrap") as pool:
        results = pool.run_many([whole(ENDINGS["passes"])] * 8 + [whole("process.kill(process.ppid, 'SIGKILL');\n")] * 2)
        assert all(result.outcome is Outcome.passed for result in results[:8])
        pool.run_many([whole(ENDINGS["passes"])] * 4)
        zygotes = [pid for worker in pool.worker_pids() for pid in process_tree(worker) if is_zygote(pid)]
        assert 1 <= len(zygotes) <= pool.workers


def run_without_zygote(monkeypatch: pytest.MonkeyPatch, programs: list[str]) -> list[ExecutionResult]:
    monkeypatch.setenv(sandbox_module.ZYGOTE_VAR, "0")
    with SandboxPool(1, SandboxLimits(timeout_s=6.0), isolation="bwrap") as plain:
        return plain.run_many(programs)


def test_every_ending_is_that_of_plain_node(pool: SandboxPool, monkeypatch: pytest.MonkeyPatch) -> None:
    programs = [whole(text) for text in ENDINGS.values()]
    forked = pool.run_many(programs)
    plain = run_without_zygote(monkeypatch, programs)
    for name, a, b in zip(ENDINGS, forked, plain):
        assert a.outcome is b.outcome, (name, a.detail, b.detail)
        assert a.detail.split("\n    at ")[0] == b.detail.split("\n    at ")[0], name  # the stacks' frames differ
    assert [result.outcome for result in forked] == [Outcome.passed] + [Outcome.failed] * 7 + [
        Outcome.compile_error, Outcome.passed]
    assert "exit status 3" in forked[3].detail and "exit status 5" in forked[5].detail


@pytest.mark.slow
def test_mbjsp_verdicts_forked_are_those_of_plain_starts(pool: SandboxPool, monkeypatch: pytest.MonkeyPatch) -> None:
    problems = [problem for problem in load_benchmark("mbjsp") if problem.canonical_solution][:PROBLEMS]
    programs = [problem.reference_program() for problem in problems]
    programs += [problem.program("    throw new Error('wrong');\n}\n") for problem in problems]
    programs += [problem.program("    return (;\n}\n") for problem in problems[:10]]
    forked = [result.outcome for result in pool.run_many(programs)]
    assert forked == [result.outcome for result in run_without_zygote(monkeypatch, programs)]
    assert forked.count(Outcome.passed) >= len(problems) * 4 // 5 and forked.count(Outcome.compile_error) == 10


def test_nothing_of_one_program_reaches_the_next(pool: SandboxPool) -> None:
    spoil = ("const _ = require('lodash');\n_.isEqual = () => true;\nglobalThis.spoiled = 1;\n"
             "Array.prototype.spoiled = 1;\nrequire.cache['/x'] = {};\nprocess.env.SPOILED = '1';\n"
             "require('fs').writeFileSync('/tmp/spoiled', 'x');\n")
    check = ("const _ = require('lodash');\n"
             "if (_.isEqual(1, 2) || globalThis.spoiled || [].spoiled || require.cache['/x'] || process.env.SPOILED"
             " || require('fs').existsSync('/tmp/spoiled')) { process.exit(7); }\n")
    results = pool.run_many([whole(check), whole(spoil), whole(check)])
    assert [result.outcome for result in results] == [Outcome.passed] * 3, [result.detail for result in results]


@pytest.mark.parametrize("signal", ["SIGKILL", "SIGSTOP", "SIGTERM"])
def test_a_program_that_signals_the_zygote_harms_no_other(pool: SandboxPool, signal: str) -> None:
    hostile, good = pool.run_many([whole(f"process.kill(process.ppid, '{signal}');\n"), whole(ENDINGS["passes"])])
    assert good.outcome is Outcome.passed, good.detail
    if signal != "SIGSTOP":  # a zygote gone before it answered: the run counts as killed, never run again
        assert hostile.outcome is Outcome.failed and "killed by signal 9" in hostile.detail, hostile.detail
    zygote_pid(pool)  # still forked from a zygote (a new one, if it was killed)


def test_a_program_cannot_trace_or_read_the_zygote(pool: SandboxPool) -> None:
    probe = ("const fs = require('fs');\nfor (const f of ['mem', 'environ', 'maps']) {\n"
             "  try { fs.readFileSync('/proc/' + process.ppid + '/' + f); process.exit(9); } catch (e) {}\n}\n")
    [result] = pool.run_many([whole(probe)])
    assert result.outcome is Outcome.passed, result.detail


def test_a_program_that_runs_past_its_limit_leaves_the_zygote_serving(pool: SandboxPool) -> None:
    before = zygote_pid(pool)
    looping, good = pool.run_many([whole("for (;;) {}\n"), whole(ENDINGS["passes"])])
    assert looping.outcome is Outcome.timeout, looping.detail
    assert good.outcome is Outcome.passed, good.detail
    assert zygote_pid(pool) == before


def test_requests_a_program_leaves_behind_never_run_the_next_program(pool: SandboxPool) -> None:
    # A Python program with the mark gets the zygote's pipes: it stops the zygote, queues runs of
    # main.js in the working directory (where the next program's will be) and exits unanswered.
    leave = (ZYGOTE_MARK + "import json, os, signal\n"
             "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
             "    argv = open(f'/proc/{pid}/cmdline', 'rb').read().split(b'\\0')\n"
             "    if argv[0].endswith(b'/node') and argv[2].endswith(b'node_zygote.js'):\n"
             "        os.kill(int(pid), signal.SIGSTOP)\n"
             "for n in range(40):\n"
             "    os.write(4, (json.dumps({'id': n, 'cwd': os.getcwd(), 'main': 'main.js', 'stderr': '/dev/null'})"
             " + '\\n').encode())\n")
    once = "require('fs').writeFileSync('/tmp/ran', 'x', {flag: 'wx'});  // throws if this program ran before\n"
    left, good = pool.run_many([leave, whole(once)])
    assert left.outcome is Outcome.passed, left.detail
    assert good.outcome is Outcome.passed, good.detail


def test_a_zygote_that_fails_its_check_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    needs_zygote()
    cache = Path.home() / ".cache" / "quench" / f"test-toolchains-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv(ENV_VAR, str(cache))
    monkeypatch.setitem(toolchains.ZYGOTE_CHECKS, "process.exit(6);", 0)  # a status the zygote must not report
    try:
        assert prepare_node_zygote() is None
        assert not list((cache / "javascript").glob("zygote-*"))
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def test_only_javascript_launchers_carry_the_mark() -> None:
    assert launcher("javascript", "").startswith(ZYGOTE_MARK)
    assert not any(launcher(language, "").startswith(ZYGOTE_MARK) for language in ("go", "cpp", "java"))
