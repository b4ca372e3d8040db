"""MBXP's languages in the sandbox: reference solutions pass, wrong ones fail, compile errors are
their own outcome, and hostile programs in each language are contained.

Runs in "bwrap" mode, where the shared build cache is bound read-only; a language whose
toolchain this machine lacks is skipped.
"""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path
from typing import Iterator

import pytest
from sandbox_helpers import mode_python, needs_language, pool_processes, skip_reason, wait_until_gone

from quench.datasets import LANGUAGES, Problem, load_benchmark
from quench.execution import Outcome, SandboxLimits, SandboxPool
from quench.execution.program_build import program_for
from quench.execution.sanitize import sanitize
from quench.execution.sanitize_braces import definition_start
from quench.execution.toolchains import has_toolchain, toolchain_dir

LANGUAGE_BENCHMARKS = {"javascript": "mbjsp", "go": "mbgp", "cpp": "mbcpp", "java": "mbjp"}

# MBGP has no reference solutions: these are the first two test problems' (MBGP/11, MBGP/12).
GO_SOLUTIONS = {
    "MBGP/11": (
        "\tb := []byte(s)\n"
        "\tfor i := 0; i < len(b); i++ {\n\t\tif b[i] == ch[0] {\n\t\t\tb = append(b[:i:i], b[i+1:]...)\n\t\t\tbreak\n\t\t}\n\t}\n"
        "\tfor i := len(b) - 1; i >= 0; i-- {\n\t\tif b[i] == ch[0] {\n\t\t\tb = append(b[:i:i], b[i+1:]...)\n\t\t\tbreak\n\t\t}\n\t}\n"
        "\treturn string(b)\n}\n"
    ),
    "MBGP/12": (
        "\tsum := func(row []int) int {\n\t\ttotal := 0\n\t\tfor _, v := range row {\n\t\t\ttotal += v\n\t\t}\n\t\treturn total\n\t}\n"
        "\tsort.Slice(M, func(i, j int) bool { return sum(M[i]) < sum(M[j]) })\n\treturn M\n}\n"
    ),
}
# A wrong answer and a program that does not build, as completions of the first test problem.
WRONG = {
    "javascript": "    return null;\n}\n",
    "go": '\treturn "wrong"\n}\n',
    "cpp": '    return "wrong";\n}\n',
    "java": '        return "wrong";\n    }\n}\n',
}
BROKEN = {
    "javascript": "    return (;\n}\n",
    "go": "\treturn s +\n}\n",
    "cpp": "    return undeclared_name;\n}\n",
    "java": "        return 42;\n    }\n}\n",  # an int where a String is due
}


@pytest.fixture(scope="module")
def pool(language_pool: SandboxPool) -> SandboxPool:
    return language_pool


def references(language: str, count: int = 2) -> list[tuple[Problem, str]]:
    """The first test problems with a reference solution, and that solution."""
    problems = load_benchmark(LANGUAGE_BENCHMARKS[language])
    if language == "go":
        return [(p, GO_SOLUTIONS[p.task_id]) for p in problems if p.task_id in GO_SOLUTIONS][:count]
    return [(p, p.canonical_solution) for p in problems if p.canonical_solution][:count]


@pytest.mark.parametrize("language", list(LANGUAGE_BENCHMARKS))
def test_references_pass_wrong_answers_fail_and_compile_errors_are_their_own(pool: SandboxPool, language: str) -> None:
    needs_language(language)
    cases = references(language)
    first = load_benchmark(LANGUAGE_BENCHMARKS[language])[0]
    programs = [p.program(solution) for p, solution in cases]
    programs += [first.program(WRONG[language]), first.program(BROKEN[language])]
    *passed, wrong, broken = pool.run_many(programs)
    assert [r.outcome for r in passed] == [Outcome.passed] * len(cases), [r.detail for r in passed]
    assert wrong.outcome is Outcome.failed, wrong.detail
    assert broken.outcome is Outcome.compile_error, broken.detail
    assert broken.detail and "(line" not in broken.detail[-12:]


def whole(language: str, text: str) -> str:
    """A whole program in `language`, run as a problem with an empty prompt and harness."""
    return Problem("hostile", "", text, "", "main", language=language).reference_program()


HOSTILE_CPP = {
    "loop": "int main() { volatile int x = 0; while (true) { x++; } }\n",
    "fork": "#include <unistd.h>\nint main() { while (true) { fork(); } }\n",
    "write": '#include <cstdio>\nint main() { const char* paths[] = {"{outside}", "{cache}"}; for (const char* p : paths) { FILE* f = fopen(p, "w");'
             ' if (f) { fputs("x", f); fclose(f); return 0; } } return 1; }\n',
    "network": "#include <sys/socket.h>\n#include <netinet/in.h>\n#include <arpa/inet.h>\n"
               "int main() { int s = socket(AF_INET, SOCK_STREAM, 0); sockaddr_in a{}; a.sin_family = AF_INET;"
               ' a.sin_port = htons({port}); inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);'
               " return connect(s, (sockaddr*)&a, sizeof a) == 0 ? 0 : 1; }\n",
    "output": '#include <cstdio>\nint main() { for (int i = 0; i < (1 << 18); i++) { fputs("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'
              'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'
              'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\\n", i % 2 ? stdout : stderr); }'
              " return 1; }\n",
}
HOSTILE_JS = {
    "loop": "while (true) {}\n",
    "fork": 'const cp = require("child_process");\nwhile (true) { try { cp.spawn("/bin/sleep", ["30"]); } catch (e) {} }\n',
    "write": 'const fs = require("fs");\nfor (const p of ["{outside}", "{cache}"]) {\n'
             '  try { fs.writeFileSync(p, "x"); process.exit(0); } catch (e) {}\n}\nprocess.exit(1);\n',
    "network": 'require("net").connect({port}, "127.0.0.1", () => process.exit(0)).on("error", () => process.exit(1));\n',
    "output": 'for (let i = 0; i < 256; i++) { process.stdout.write("x".repeat(1 << 20)); '
              'process.stderr.write("y".repeat(1 << 20)); }\nprocess.exit(1);\n',
}
HOSTILE_GO = {
    "loop": "package main\nfunc main() {\n\tfor {\n\t}\n}\n",
    "fork": 'package main\nimport "os/exec"\nfunc main() {\n\tfor {\n\t\t_ = exec.Command("/bin/sleep", "30").Start()\n\t}\n}\n',
    "write": 'package main\nimport "os"\nfunc main() {\n\tfor _, p := range []string{"{outside}", "{cache}"} {\n'
             '\t\tif os.WriteFile(p, []byte("x"), 0o644) == nil {\n\t\t\tos.Exit(0)\n\t\t}\n\t}\n\tos.Exit(1)\n}\n',
    "network": 'package main\nimport (\n\t"net"\n\t"os"\n)\nfunc main() {\n\tif _, err := net.Dial("tcp", "127.0.0.1:{port}");'
               " err == nil {\n\t\tos.Exit(0)\n\t}\n\tos.Exit(1)\n}\n",
    "output": 'package main\nimport (\n\t"os"\n\t"strings"\n)\nfunc main() {\n\tline := strings.Repeat("x", 1<<20)\n'
              "\tfor i := 0; i < 256; i++ {\n\t\tos.Stdout.WriteString(line)\n\t\tos.Stderr.WriteString(line)\n\t}\n"
              "\tos.Exit(1)\n}\n",
}
HOSTILE_JAVA = {
    "loop": "class Main {\n    public static void main(String[] args) {\n        long x = 0;\n        while (true) { x++; }\n"
            "    }\n}\n",
    "fork": "class Main {\n    public static void main(String[] args) {\n        while (true) {\n"
            '            try { new ProcessBuilder("/bin/sleep", "30").start(); } catch (Exception e) { }\n        }\n'
            "    }\n}\n",
    "write": "class Main {\n    public static void main(String[] args) {\n"
             '        for (String p : new String[] {"{outside}", "{cache}"}) {\n'
             '            try { java.nio.file.Files.writeString(java.nio.file.Path.of(p), "x"); System.exit(0); }'
             " catch (Exception e) { }\n        }\n        System.exit(1);\n    }\n}\n",
    "network": "class Main {\n    public static void main(String[] args) {\n"
               '        try (java.net.Socket s = new java.net.Socket("127.0.0.1", {port})) { System.exit(0); }'
               " catch (Exception e) { System.exit(1); }\n    }\n}\n",
    "output": "class Main {\n    public static void main(String[] args) {\n"
              '        String line = "x".repeat(1 << 20);\n'
              "        for (int i = 0; i < 256; i++) { System.out.print(line); System.err.print(line); }\n"
              "        System.exit(1);\n    }\n}\n",
}
HOSTILE = {"cpp": HOSTILE_CPP, "javascript": HOSTILE_JS, "go": HOSTILE_GO, "java": HOSTILE_JAVA}


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A TCP server on the host's loopback that no sandboxed program may reach."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    yield server
    server.close()


@pytest.fixture
def outside() -> Iterator[Path]:
    """A directory anyone may write to, outside the sandbox's scratch space."""
    directory = Path("/var/tmp") / f"quench-hostile-{uuid.uuid4().hex}"
    directory.mkdir()
    directory.chmod(0o777)
    yield directory / "written"
    for entry in directory.iterdir():
        entry.unlink()
    directory.rmdir()


@pytest.mark.slow
@pytest.mark.parametrize("language", list(HOSTILE))
def test_hostile_programs_are_contained(pool: SandboxPool, language: str, listener: socket.socket,
                                        outside: Path) -> None:
    needs_language(language)
    cache = Path(toolchain_dir()) / "cpp" / "bits" / "stdc++.h.gch"
    before = cache.stat().st_mtime_ns if cache.exists() else None
    fill = {"{outside}": str(outside), "{cache}": str(cache), "{port}": str(listener.getsockname()[1])}
    names = list(HOSTILE[language])
    texts = []
    for name in names:
        text = HOSTILE[language][name]
        for key, value in fill.items():
            text = text.replace(key, value)
        texts.append(whole(language, text))
    results = dict(zip(names, pool.run_many(texts)))
    assert results["loop"].outcome is Outcome.timeout, results["loop"].detail
    assert results["fork"].outcome in (Outcome.crashed, Outcome.timeout), results["fork"].detail
    assert "processes" in results["fork"].detail or results["fork"].outcome is Outcome.timeout
    for name in ("write", "network", "output"):  # a busy machine may run a JVM's build past the limit
        assert results[name].outcome in (Outcome.failed, Outcome.timeout), (name, results[name].detail)
    assert len(results["output"].detail) < 4096
    assert not outside.exists()
    assert (cache.stat().st_mtime_ns if cache.exists() else None) == before
    with pytest.raises(OSError):
        listener.accept()
    assert wait_until_gone("/bin/sleep") == []
    assert len(pool_processes(pool)) == 2 * pool.workers


def test_nothing_a_program_leaves_reaches_the_next(pool: SandboxPool) -> None:
    needs_language("javascript")
    leave = 'require("fs").writeFileSync("/tmp/left-behind", "x");\n'
    find = 'const fs = require("fs");\nprocess.exit(fs.existsSync("/tmp/left-behind") ? 1 : 0);\n'
    for _ in range(2):  # both workers
        assert [r.outcome for r in pool.run_many([whole("javascript", leave)] * 2)] == [Outcome.passed] * 2
        assert [r.outcome for r in pool.run_many([whole("javascript", find)] * 2)] == [Outcome.passed] * 2


def test_build_cache_is_read_only_and_outside_scratch() -> None:
    assert os.path.isabs(toolchain_dir())
    assert not toolchain_dir().startswith("/tmp/")


@pytest.mark.parametrize("language", list(LANGUAGE_BENCHMARKS))
def test_a_chat_answer_with_the_reference_passes_once_sanitized(pool: SandboxPool, language: str) -> None:
    needs_language(language)
    [(problem, solution)] = references(language, count=1)
    start = definition_start(problem.prompt, problem.entry_point)
    fence = LANGUAGES[language].fences[0]
    answer = f"Here it is:\n```{fence}\n{problem.prompt[start:]}{solution}\n```\nIt passes the examples."
    clean = sanitize(problem, answer, "chat")
    [result] = pool.run_many([program_for(problem, clean.completion, clean.solution)])
    assert result.outcome is Outcome.passed, (result.detail, clean.solution)


def test_references_pass_without_namespaces_too() -> None:
    """"rlimits" mode: programs run as nobody, who may be unable to read the build cache; builds go without it."""
    reason = skip_reason("rlimits")
    if reason is not None:
        pytest.skip(reason)
    languages = [language for language in LANGUAGE_BENCHMARKS if has_toolchain(language)]
    cases = [references(language, count=1)[0] for language in languages]
    slow_builds = SandboxLimits(timeout_s=45.0)  # g++ without the precompiled header, on a busy machine
    with SandboxPool(2, slow_builds, isolation="rlimits", python=mode_python("rlimits")) as sandbox:
        results = sandbox.run_many([problem.program(solution) for problem, solution in cases])
    assert [r.outcome for r in results] == [Outcome.passed] * len(cases), [r.detail for r in results]


def test_a_javascript_syntax_error_at_run_time_is_a_failure_and_one_at_parse_time_a_compile_error(
        pool: SandboxPool) -> None:
    """Only a failed run that names a parse error is checked with `node --check`; the check decides."""
    needs_language("javascript")
    programs = {
        "json": 'JSON.parse("{oops");\n',  # a SyntaxError thrown by running code
        "recursion": "function f(n) { return f(n + 1) + 1; }\nf(0);\n",  # a RangeError thrown by running code
        "thrown": 'throw new Error("no parse error here");\n',
        "parse": "const x = (;\n",
        "early": "let a = 1;\nlet a = 2;\n",  # an early error: the file never runs
        "nested": "const x = " + "[" * 3000 + "]" * 3000 + ";\n",  # deeper than the parser's stack: a RangeError
    }
    results = dict(zip(programs, pool.run_many([whole("javascript", text) for text in programs.values()])))
    outcomes = {name: result.outcome for name, result in results.items()}
    assert outcomes == {"json": Outcome.failed, "recursion": Outcome.failed, "thrown": Outcome.failed,
                        "parse": Outcome.compile_error, "early": Outcome.compile_error,
                        "nested": Outcome.compile_error}, results
    assert "SyntaxError" in results["early"].detail
