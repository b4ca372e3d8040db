"""Hostile programs in MBXP's languages, beyond test_languages.py's suite: fork bombs that replicate
themselves (each child runs the same program again), and files a program leaves behind — next to
its build outputs, in /tmp, in /dev/shm — that must never reach the next program.

Runs in "bwrap" mode; a language whose toolchain this machine lacks is skipped.
"""

from __future__ import annotations

import uuid

import pytest
from sandbox_helpers import pool_processes, wait_until_gone

from quench.datasets import Problem
from quench.execution import Outcome, SandboxPool
from quench.execution.toolchains import has_toolchain

LANGUAGES = ("javascript", "go", "cpp", "java")
# Each child runs the program again with the marker as its argument, so the host can look for survivors.
SELF_REPLICATING = {
    "javascript": 'const cp = require("child_process");\n'
                  'while (true) { try { cp.spawn(process.execPath, [__filename, "{marker}"]); } catch (e) {} }\n',
    "go": 'package main\nimport "os/exec"\nfunc main() {\n'
          '\tfor {\n\t\t_ = exec.Command("/proc/self/exe", "{marker}").Start()\n\t}\n}\n',
    "cpp": "#include <unistd.h>\nint main(int argc, char** argv) {\n"
           '    while (true) { if (fork() == 0) { execl("/proc/self/exe", "main", "{marker}", (char*)0); } }\n}\n',
    "java": "class Main {\n    public static void main(String[] args) {\n"
            "        ProcessHandle.Info self = ProcessHandle.current().info();\n"
            "        java.util.List<String> argv = new java.util.ArrayList<>();\n"
            "        argv.add(self.command().get());\n"
            "        argv.addAll(java.util.Arrays.asList(self.arguments().get()));\n"
            '        argv.add("{marker}");\n'
            "        while (true) {\n"
            "            try { new ProcessBuilder(argv).start(); } catch (Exception e) { }\n"
            "        }\n    }\n}\n",
}
LEAVE = {  # exits 0 once it has left a file in each place
    "javascript": 'const fs = require("fs");\nfor (const p of ["left-behind", "/tmp/left-behind", "/dev/shm/left-behind"])'
                  ' { fs.writeFileSync(p, "x"); }\n',
    "go": 'package main\nimport "os"\nfunc main() {\n'
          '\tfor _, p := range []string{"left-behind", "/tmp/left-behind", "/dev/shm/left-behind"} {\n'
          '\t\tif os.WriteFile(p, []byte("x"), 0o644) != nil {\n\t\t\tos.Exit(1)\n\t\t}\n\t}\n}\n',
    "cpp": '#include <cstdio>\nint main() {\n    const char* paths[] = {"left-behind", "/tmp/left-behind", "/dev/shm/left-behind"};\n'
           '    for (const char* p : paths) { FILE* f = fopen(p, "w"); if (!f) { return 1; } fputs("x", f); fclose(f); }\n'
           "    return 0;\n}\n",
    "java": "class Main {\n    public static void main(String[] args) throws Exception {\n"
            '        for (String p : new String[] {"left-behind", "/tmp/left-behind", "/dev/shm/left-behind"}) {\n'
            '            java.nio.file.Files.writeString(java.nio.file.Path.of(p), "x");\n        }\n    }\n}\n',
}
FIND = {  # exits 1 if anything an earlier program left is there
    "javascript": 'const fs = require("fs");\nprocess.exit(["left-behind", "/tmp/left-behind", "/dev/shm/left-behind"]'
                  ".some((p) => fs.existsSync(p)) ? 1 : 0);\n",
    "go": 'package main\nimport "os"\nfunc main() {\n'
          '\tfor _, p := range []string{"left-behind", "/tmp/left-behind", "/dev/shm/left-behind"} {\n'
          "\t\tif _, err := os.Stat(p); err == nil {\n\t\t\tos.Exit(1)\n\t\t}\n\t}\n}\n",
    "cpp": '#include <unistd.h>\nint main() {\n    const char* paths[] = {"left-behind", "/tmp/left-behind", "/dev/shm/left-behind"};\n'
           "    for (const char* p : paths) { if (access(p, F_OK) == 0) { return 1; } }\n    return 0;\n}\n",
    "java": "class Main {\n    public static void main(String[] args) {\n"
            '        for (String p : new String[] {"left-behind", "/tmp/left-behind", "/dev/shm/left-behind"}) {\n'
            "            if (new java.io.File(p).exists()) { System.exit(1); }\n        }\n    }\n}\n",
}


@pytest.fixture(scope="module")
def pool(language_pool: SandboxPool) -> SandboxPool:
    return language_pool


def needs(language: str) -> None:
    if not has_toolchain(language):
        pytest.skip(f"no {language} toolchain here")


def whole(language: str, text: str) -> str:
    """A whole program in `language`, run as a problem with an empty prompt and harness."""
    return Problem("hostile", "", text, "", "main", language=language).reference_program()


@pytest.mark.slow
@pytest.mark.parametrize("language", LANGUAGES)
def test_a_self_replicating_fork_bomb_is_stopped_by_the_process_limit(pool: SandboxPool, language: str) -> None:
    needs(language)
    marker = f"quench-bomb-{uuid.uuid4().hex}"
    [result] = pool.run_many([whole(language, SELF_REPLICATING[language].replace("{marker}", marker))])
    stopped = result.outcome is Outcome.crashed and "processes" in result.detail
    # A JVM takes a second of CPU to start, so on a busy machine Java's bomb may grow too slowly
    # to reach the limit before the wall clock ends it.
    assert stopped or (language == "java" and result.outcome is Outcome.timeout), (result.outcome, result.detail)
    assert wait_until_gone(marker, patience_s=5.0) == []
    assert len(pool_processes(pool)) == 2 * pool.workers
    [after] = pool.run_many([whole(language, FIND[language])])  # the worker still runs programs
    assert after.outcome is Outcome.passed, after.detail


@pytest.mark.parametrize("language", LANGUAGES)
def test_files_a_program_leaves_never_reach_the_next(pool: SandboxPool, language: str) -> None:
    needs(language)
    for _ in range(2):  # both workers
        left = pool.run_many([whole(language, LEAVE[language])] * 2)
        assert [r.outcome for r in left] == [Outcome.passed] * 2, [r.detail for r in left]
        found = pool.run_many([whole(language, FIND[language])] * 2)
        assert [r.outcome for r in found] == [Outcome.passed] * 2, [r.detail for r in found]


RESULT_PIPE = {  # exits 0 when descriptor 3 (the sandbox's result pipe in the launcher) is closed to it
    "go": 'package main\nimport "os"\nfunc main() {\n\tif _, err := os.NewFile(3, "pipe").Write([]byte("x")); err == nil {\n'
          "\t\tos.Exit(1)\n\t}\n}\n",
    "cpp": "#include <unistd.h>\nint main() { return write(3, \"x\", 1) == 1 ? 1 : 0; }\n",
}


@pytest.mark.parametrize("language", list(RESULT_PIPE))
def test_the_launchers_result_pipe_is_closed_to_the_program(pool: SandboxPool, language: str) -> None:
    needs(language)
    [result] = pool.run_many([whole(language, RESULT_PIPE[language])])
    assert result.outcome is Outcome.passed, result.detail
