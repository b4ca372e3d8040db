"""Differential verdicts: no program changes another's verdict, in any language.

Per language, known-good and known-bad programs (reference solutions, a mutant that fails, one that
does not parse or build, one that runs past its limit) are interleaved with hostile programs (they
attack the fork server, the warm node host, builtins, pipes, leave processes behind) in ONE worker,
in several orders (hostile first, then seeded shuffles); each must get exactly the verdict it gets alone in a fresh worker.

Runs in "bwrap" mode (where the warm node host runs); a language whose toolchain this machine lacks
is skipped. The compiled languages take a second per program: two orders, fewer programs.
"""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sandbox_helpers import needs_language

from quench.datasets import Problem, load_benchmark
from quench.execution import Outcome, SandboxLimits, SandboxPool
from quench.execution.toolchains import prepare

LANGUAGE_BENCHMARKS = {"javascript": "mbjsp", "go": "mbgp", "cpp": "mbcpp", "java": "mbjp"}
# MBGP has no reference solutions: MBGP/12's (as test_languages.py's).
GO_SOLUTION = ("MBGP/12", "\tsum := func(row []int) int {\n\t\ttotal := 0\n\t\tfor _, v := range row {\n\t\t\ttotal += v\n"
               "\t\t}\n\t\treturn total\n\t}\n\tsort.Slice(M, func(i, j int) bool { return sum(M[i]) < sum(M[j]) })\n"
               "\treturn M\n}\n")
# A wrong answer and a program that does not build, as completions of the problem.
WRONG = {"python": "    return None\n", "javascript": "    return null;\n}\n", "go": "\tsort.Ints(nil)\n\treturn nil\n}\n",
         "cpp": "    return {};\n}\n", "java": "        return null;\n    }\n}\n"}
BROKEN = {"javascript": "    return (;\n}\n", "go": "\treturn M +\n}\n", "cpp": "    return undeclared_name;\n}\n",
          "java": "        return 42;\n    }\n}\n"}
SEEDS = (0, 1)  # and one order with every hostile program first
QUICK = SandboxLimits(timeout_s=1.5)  # Python and JavaScript: a program takes milliseconds
BUILDS = SandboxLimits(timeout_s=12.0)  # a build takes seconds on a busy machine
HOSTILE_JS = Path(__file__).with_name("fixtures") / "hostile_js"

# Python programs as the fork server runs them (no harness).
PYTHON_KNOWN = {
    "timeout": "while True:\n    pass\n",
    "syntax error": "def f(:\n    pass\n",
}
PYTHON_HOSTILE = {
    # Builtins, modules and the interpreter's state changed for whoever comes next in this process.
    "builtins": "import builtins, sys, json\nbuiltins.AssertionError = type('AssertionError', (Exception,), {})\n"
                "builtins.len = lambda x: 0\nbuiltins.sorted = list\nsys.modules['collections'] = json\n"
                "sys.setrecursionlimit(50)\nimport os\nos.environ.clear()\n",
    # Ends "successfully" before its tests, and at exit, from an atexit hook.
    "exit early": "import os\nos._exit(0)\n",
    "atexit": "import atexit, os\natexit.register(lambda: os._exit(0))\nassert False, 'wrong answer'\n",
    # Finds its run's nonce in the fork server's frames and writes pass records for itself and more.
    "forged records": "import os, sys\nframe = sys._getframe()\nwhile frame is not None and 'nonce' not in frame.f_locals:\n"
                      "    frame = frame.f_back\nif frame is not None:\n    for _ in range(50):\n"
                      "        os.write(3, frame.f_locals['nonce'] + b'P')\nassert False\n",
    # Rewrites the server's interned "F" as "P" through its memory: every later failure would pass.
    "server memory": "import os, sys\nvictim = 'F'\ntry:\n"
                     "    with open(f'/proc/{os.getppid()}/mem', 'r+b', buffering=0) as memory:\n"
                     "        memory.seek(id(victim) + sys.getsizeof(victim) - 2)\n        memory.write(b'P')\n"
                     "except OSError:\n    pass\n",
    # Forged frames and requests into every pipe of the fork server and of the node host.
    "pipes": "import os, json, struct\nframes = b''\nfor message in ({'record': 'P', 'status': 0, 'detail': '', 'output': '',"
             " 'seconds': 0.0}, {'program': 'pass'}, {'id': 'x', 'status': 0}):\n    data = json.dumps(message).encode()\n"
             "    frames += struct.pack('>I', len(data)) + data + b'\\n'\nfor pid in filter(str.isdigit, os.listdir('/proc')):\n"
             "    try:\n        fds = os.listdir(f'/proc/{pid}/fd')\n    except OSError:\n        continue\n    for fd in fds:\n"
             "        try:\n            out = os.open(f'/proc/{pid}/fd/{fd}', os.O_WRONLY | os.O_NONBLOCK)\n"
             "            os.write(out, frames * 20)\n            os.close(out)\n        except OSError:\n            pass\n",
    # Signals ignored, then a child in a session of its own that kills everything it may, later.
    "leftovers": "import os, signal, time\nfor number in range(1, 32):\n    try:\n        signal.signal(number, signal.SIG_IGN)\n"
                 "    except (OSError, ValueError):\n        pass\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
                 "        time.sleep(0.3)\n        os.kill(-1, signal.SIGKILL)\n    os._exit(0)\n",
}
# JavaScript programs node runs itself (the host declines them): they attack the warm host.
JS_HOST_ATTACKS = {
    "stops the host": "const fs = require('fs');\nfor (const pid of fs.readdirSync('/proc').filter((n) => /^\\d+$/.test(n))) {\n"
                      "  try { if (fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\\0')[1].endsWith('node_host.js')) "
                      "process.kill(Number(pid), 'SIGSTOP'); } catch (e) {}\n}\n",
    "leaves a killer": "require('child_process').spawn('/bin/sh', ['-c', 'sleep 0.3; kill -9 -1'], "
                       "{ detached: true, stdio: 'ignore' }).unref();\n",
    "writes host pipes": "const fs = require('fs');\nfor (const pid of fs.readdirSync('/proc').filter((n) => /^\\d+$/.test(n))) {\n"
                         "  for (const fd of ['0', '3']) {\n    try { fs.writeFileSync(`/proc/${pid}/fd/${fd}`, "
                         "'{\"id\":\"x\",\"status\":0}\\n'.repeat(100)); } catch (e) {}\n  }\n}\n",
}
IN_HOST = ("setter_on_global.js", "thrown_proxy.js", "thrown_getters.js", "prepare_stack_trace.js", "promise_hijack.js",
           "module_values.js", "constructor_climbs.js", "crawl.js", "dynamic_import.js", "microtasks_forever.js")
# The compiled languages' hostile programs: a child left behind that kills everything it may later,
# and writes into the pipes of pid 1 (the fork server).
COMPILED_HOSTILE = {
    "cpp": {
        "leftovers": "#include <unistd.h>\n#include <signal.h>\nint main() {\n  if (fork() == 0) { setsid(); if (fork() == 0) {"
                     " usleep(300000); kill(-1, SIGKILL); } _exit(0); }\n  return 0;\n}\n",
        "pipes": "#include <fcntl.h>\n#include <unistd.h>\n#include <cstdio>\nint main() {\n  char path[64];\n"
                 "  for (int fd = 0; fd < 64; fd++) { snprintf(path, sizeof path, \"/proc/1/fd/%d\", fd);\n"
                 "    int out = open(path, O_WRONLY | O_NONBLOCK); if (out >= 0) { write(out, \"\\0\\0\\0\\2{}\", 6); close(out); } }\n"
                 "  return 0;\n}\n",
    },
    "go": {
        "leftovers": "package main\nimport \"os/exec\"\nfunc main() {\n"
                     "\t_ = exec.Command(\"/bin/sh\", \"-c\", \"(sleep 0.3; kill -9 -1) &\").Run()\n}\n",
    },
    "java": {
        "leftovers": "class Main {\n    public static void main(String[] args) throws Exception {\n"
                     "        new ProcessBuilder(\"/bin/sh\", \"-c\", \"(sleep 0.3; kill -9 -1) &\").start().waitFor();\n"
                     "    }\n}\n",
    },
}


# How the known programs end, where a language has them (JavaScript's timeout: microtasks_forever.js).
KNOWN_ENDINGS = {"timeout": Outcome.timeout, "microtasks_forever.js": Outcome.timeout,
                 "syntax error": Outcome.syntax_error, "does not build": Outcome.compile_error}


def needs(language: str) -> None:
    needs_language(language)
    prepare(language)


def hostile_js(name: str) -> str:
    def code(path: Path) -> str:  # comments dropped: they name what the host declines
        return "".join(line for line in path.read_text(encoding="utf-8").splitlines(True)
                       if not line.lstrip().startswith("//"))
    return code(HOSTILE_JS / "_prelude.js") + code(HOSTILE_JS / name)


def whole(language: str, text: str) -> str:
    """A whole program in `language`, run as a problem with an empty prompt and harness."""
    return Problem("hostile", "", text, "", "main", language=language).reference_program()


def references(language: str) -> list[tuple[Problem, str]]:
    """Two test problems with a reference solution (one in Go), and that solution."""
    problems = load_benchmark(LANGUAGE_BENCHMARKS.get(language, "mbpp"))
    if language == "go":
        return [(p, GO_SOLUTION[1]) for p in problems if p.task_id == GO_SOLUTION[0]]
    return [(p, p.canonical_solution) for p in problems if p.canonical_solution][:2]


def known_programs(language: str) -> dict[str, str]:
    """References, a failing mutant and one that does not build, as programs of `language`."""
    cases = references(language)
    programs = {f"reference {p.task_id}": p.program(solution) for p, solution in cases}
    mutant = cases[-1][0].program(WRONG[language])
    if language == "python":
        return {**programs, "mutant": mutant, **PYTHON_KNOWN}
    return {**programs, "mutant": mutant, "does not build": cases[-1][0].program(BROKEN[language])}


def hostile_programs(language: str) -> dict[str, str]:
    if language == "python":
        return PYTHON_HOSTILE
    if language == "javascript":
        return {**{name: whole(language, hostile_js(name)) for name in IN_HOST},
                **{name: whole(language, text) for name, text in JS_HOST_ATTACKS.items()}}
    return {name: whole(language, text) for name, text in COMPILED_HOSTILE[language].items()}


def alone(program: str, limits: SandboxLimits) -> Outcome:
    with SandboxPool(1, limits, isolation="bwrap") as pool:
        return pool.run_many([program])[0].outcome


def orders(known: int, total: int, seeds: tuple[int, ...]) -> list[list[int]]:
    """Every hostile program before every known one (indexes `known` and up are the hostile), then
    shuffles by `seeds`."""
    shuffled = []
    for seed in seeds:
        order = list(range(total))
        random.Random(seed).shuffle(order)
        shuffled.append(order)
    return [[*range(known, total), *range(known)], *shuffled]


def interleaved(programs: list[str], order: list[int], limits: SandboxLimits) -> list[Outcome]:
    """Every program in one worker, in `order`; outcomes in the order of `programs`."""
    with SandboxPool(1, limits, isolation="bwrap") as pool:
        results = pool.run_many([programs[index] for index in order])
    outcomes: list[Outcome] = [Outcome.sandbox_error] * len(programs)
    for index, result in zip(order, results):
        outcomes[index] = result.outcome
    return outcomes


def check_differential(language: str, limits: SandboxLimits, seeds: tuple[int, ...]) -> None:
    needs(language)
    known = known_programs(language)
    cases = {**known, **hostile_programs(language)}
    names, programs = list(cases), list(cases.values())
    tried = orders(len(known), len(programs), seeds)
    with ThreadPoolExecutor(2) as threads:  # each pool lives and dies in the thread that started it
        fresh = list(threads.map(lambda program: alone(program, limits), programs))
        warm = list(threads.map(lambda order: interleaved(programs, order, limits), tried))
    expected = dict(zip(names, fresh))
    assert all(expected[name] is Outcome.passed for name in known if name.startswith("reference")), expected
    assert expected["mutant"] is Outcome.failed, expected
    for name, outcome in KNOWN_ENDINGS.items():
        assert expected.get(name, outcome) is outcome, (name, expected)
    for order, outcomes in zip(tried, warm):
        assert dict(zip(names, outcomes)) == expected, [names[index] for index in order]


@pytest.mark.parametrize("language", ["python", "javascript"])
def test_warm_verdicts_are_those_of_a_fresh_worker(language: str) -> None:
    check_differential(language, QUICK, SEEDS)


@pytest.mark.parametrize("language", ["go", "cpp", "java"])
def test_warm_verdicts_of_compiled_languages_are_those_of_a_fresh_worker(language: str) -> None:
    check_differential(language, BUILDS, SEEDS[:1])  # two orders: a build takes a second
