"""A verdict is a message the program cannot forge: wrong programs that try to pass anyway.

Each attack is a wrong answer to a real problem plus a trick: exiting with status 0 before the
tests end (from the function, a static initializer, an exit or exception handler, another
thread), neutering the test (`#define throw`, a reassigned `compare`, a patched lodash, an
`operator==` or `equals` that always agrees), forging the harness's report, reading the token or
the test's expected values, or lying about the returned value (Python). Every one must fail, with
the outcome named where it is fixed, in every sandbox mode this machine can run; the reference
that follows on the same workers still passes. Programs run as the product runs them
(`program_for`), so a chat answer's whole solution (Go's imports) goes through the same harness.
"""

from __future__ import annotations

from typing import Iterator

import pytest
from sandbox_helpers import MODES, mode_python, skip_reason

from quench.datasets import Problem, load_benchmark
from quench.execution import Outcome, SandboxLimits, SandboxPool
from quench.execution.program_build import program_for
from quench.execution.toolchains import has_toolchain, prepare

NOT_PASSED = None  # any outcome but `passed`
WRONG_JS = "  return 0;\n}\n"
WRONG_CPP = "    return 0;\n}\n"
WRONG_JAVA = "        return 0;\n    }\n}\n"
# name: (completion, outcome); MBJSP/14 findVolume(l, b, h)
JAVASCRIPT = {
    "process.exit(0)": ("  process.exit(0);\n}\n", Outcome.crashed),
    "uncaughtException handler exits 0": (WRONG_JS + "process.on('uncaughtException', () => process.exit(0));\n",
                                          Outcome.crashed),
    "'exit' handler sets exitCode 0": (WRONG_JS + "process.on('exit', () => { process.exitCode = 0; });\n",
                                       Outcome.crashed),
    "process.reallyExit(0)": ("  process.reallyExit(0);\n}\n", Outcome.crashed),
    "compare reassigned": (WRONG_JS + "compare = () => true;\n", Outcome.failed),
    "lodash's isEqual patched": (WRONG_JS + "require('lodash').isEqual = () => true;\n", Outcome.failed),
    "console.log and stdout print a pass, then exit 0": (
        WRONG_JS + "console.log = process.stdout.write = () => true;\nconsole.log('passed');\n"
        "process.on('uncaughtException', () => process.exit(0));\n", Outcome.crashed),
    "forged report on fd 4": (WRONG_JS + "require('fs').writeSync(4, 'P');\nprocess.exit(0);\n", Outcome.failed),
    "reads the token on fd 3, then reports": (
        WRONG_JS + "const b = Buffer.alloc(64); let n = 0;\ntry { n = require('fs').readSync(3, b); } catch (e) {}\n"
        "require('fs').writeSync(4, Buffer.concat([b.subarray(0, n), Buffer.from('P')]));\nprocess.exit(0);\n",
        Outcome.failed),
    "reads the test's expected values from main.js": (
        "  const src = require('fs').readFileSync(__filename, 'utf8');\n"
        "  const m = src.match(new RegExp('findVolume\\\\(' + [l, b, h].join(', ') + '\\\\);\\\\s*var v\\\\d+ = (\\\\d+)'));\n"
        "  return m ? Number(m[1]) : 0;\n}\n", Outcome.failed),
    "reads the test's text through caller": (
        "  const src = findVolume.caller ? findVolume.caller.toString() : '';\n"
        "  const m = src.match(new RegExp('findVolume\\\\(' + [l, b, h].join(', ') + '\\\\);\\\\s*var v\\\\d+ = (\\\\d+)'));\n"
        "  return m ? Number(m[1]) : 0;\n}\n", Outcome.failed),
    "exits 0 from a promise": (WRONG_JS + "Promise.resolve().then(() => process.exit(0));\n", NOT_PASSED),
    "SIGTERM handler exits 0": (WRONG_JS + "process.on('SIGTERM', () => process.exit(0));\n"
                                "process.kill(process.pid, 'SIGTERM');\n", NOT_PASSED),
    "Function.prototype.call patched": (WRONG_JS + "Function.prototype.call = function () { return true; };\n",
                                        NOT_PASSED),
}
# MBCPP/14 int findVolume(int l, int b, int h)
CPP = {
    "std::exit(0) in a static initializer": (
        WRONG_CPP + "static int leave = [](){ std::exit(0); return 0; }();\n", Outcome.crashed),
    "#define throw return 0;": (WRONG_CPP + "#define throw return 0;\n", Outcome.failed),
    "set_terminate calls _Exit(0)": (
        WRONG_CPP + "static int t = [](){ std::set_terminate([](){ _Exit(0); }); return 0; }();\n", Outcome.crashed),
    "#define main": (WRONG_CPP + "#define main main_\n", NOT_PASSED),
    "pop_macro, then #define throw": (WRONG_CPP + '#pragma pop_macro("throw")\n#define throw return 0;\n',
                                      Outcome.failed),
    "#define if(x) if(0)": (WRONG_CPP + "#define if(x) if(0)\n", Outcome.failed),
    "a compare overload that agrees": (WRONG_CPP + "bool compare(int a, int b) { return true; }\n", Outcome.failed),
    "atexit handler calls _Exit(0)": (
        WRONG_CPP + "static int a = [](){ std::atexit([](){ _Exit(0); }); return 0; }();\n", Outcome.failed),
    "quick_exit(0)": ("    std::quick_exit(0);\n}\n", Outcome.crashed),
    "SIGABRT handler calls _Exit(0)": (
        WRONG_CPP + "static int s = [](){ std::signal(SIGABRT, [](int){ _Exit(0); }); return 0; }();\n",
        Outcome.crashed),
    "constructor(1) reads the token, then reports": (
        WRONG_CPP + "static char stolen[80]; static long got = 0;\n"
        "__attribute__((constructor(1))) static void steal() { long n = read(3, stolen, 64); got = n > 0 ? n : 0; }\n"
        "static int r = [](){ std::atexit([](){ stolen[got] = 'P'; if (write(4, stolen, got + 1)) {} _Exit(0); });"
        " return 0; }();\n", NOT_PASSED),
    "forged report on fd 4": ('    if (write(4, "P", 1)) {}\n    _Exit(0);\n}\n', Outcome.failed),
    "reads the test's expected values from main.cpp": (
        '    std::ifstream in("main.cpp"); std::string s((std::istreambuf_iterator<char>(in)), {});\n'
        '    std::smatch m; std::regex r("findVolume\\\\(" + std::to_string(l) + ", " + std::to_string(b) + ", "'
        ' + std::to_string(h) + "\\\\);\\\\s*if \\\\(!\\\\(compare\\\\(x\\\\d+, (\\\\d+)");\n'
        "    return std::regex_search(s, m, r) ? std::stoi(m[1]) : 0;\n}\n", Outcome.failed),
}
# MBJP/21 List<Integer> multiplesOfNum(int m, int n)
JAVA = {
    "System.exit(0)": ("        System.exit(0);\n        return null;\n    }\n}\n", Outcome.crashed),
    "shutdown hook halts 0": (
        "        Runtime.getRuntime().addShutdownHook(new Thread(() -> Runtime.getRuntime().halt(0)));\n"
        "        return new ArrayList<>();\n    }\n}\n", Outcome.crashed),
    "Runtime.halt(0)": ("        Runtime.getRuntime().halt(0);\n        return null;\n    }\n}\n", Outcome.crashed),
    "System.exit(0) from another thread": (
        "        new Thread(() -> System.exit(0)).start();\n"
        "        try { Thread.sleep(20000); } catch (InterruptedException e) { }\n        return null;\n    }\n}\n",
        Outcome.crashed),
    "uncaught exception handler halts 0": (
        "        Thread.setDefaultUncaughtExceptionHandler((t, e) -> Runtime.getRuntime().halt(0));\n"
        "        return new ArrayList<>();\n    }\n}\n", Outcome.crashed),
    "a List whose equals always agrees": (
        "        return new ArrayList<Integer>() { public boolean equals(Object o) { return true; } };\n    }\n}\n",
        Outcome.failed),
    "forged report on fd 4": (
        "        try { new java.io.FileOutputStream(\"/proc/self/fd/4\").write('P'); } catch (Exception e) { }\n"
        "        System.exit(0);\n        return null;\n    }\n}\n", Outcome.failed),
    "reads the token on fd 3, then reports": (
        "        try { byte[] t = java.nio.file.Files.readAllBytes(java.nio.file.Path.of(\"/proc/self/fd/3\"));\n"
        "            java.io.FileOutputStream o = new java.io.FileOutputStream(\"/proc/self/fd/4\");\n"
        "            o.write(t); o.write('P'); o.close(); } catch (Exception e) { }\n"
        "        System.exit(0);\n        return null;\n    }\n}\n", Outcome.failed),
    "reads the test's expected values from Main.java": (
        "        try { String s = java.nio.file.Files.readString(java.nio.file.Path.of(\"Main.java\"));\n"
        "            java.util.regex.Matcher x = java.util.regex.Pattern.compile(\"multiplesOfNum\\\\(\" + m + \", \" + n"
        " + \"\\\\);\\\\s*List<Integer> v\\\\d+ = Arrays.asList\\\\(([^)]*)\\\\)\").matcher(s);\n"
        "            List<Integer> r = new ArrayList<>();\n"
        "            if (x.find()) { for (String p : x.group(1).split(\", \")) { r.add(Integer.parseInt(p)); } }\n"
        "            return r; } catch (Exception e) { return new ArrayList<>(); }\n    }\n}\n", Outcome.failed),
}
GO_HEAD = ('package main\n\nimport (\n\t"encoding/json"\n\t"os"\n\t"reflect"\n\t"runtime"\n\t"syscall"\n)\n\n'
           "var _, _, _, _, _ = json.Marshal, os.Exit, reflect.DeepEqual, runtime.Goexit, syscall.Exit\n\n")
GO_WRONG = "func find_Volume(l int, b int, h int) float64 {\n\treturn 0\n}\n"
# MBGP/14 find_Volume(l, b, h int) float64, as whole solutions (their own imports)
GO = {
    "os.Exit(0) in init()": (GO_HEAD + GO_WRONG + "func init() { os.Exit(0) }\n", Outcome.crashed),
    "os.Exit(0) in a package variable's initializer": (
        GO_HEAD + GO_WRONG + "var leave = func() int { os.Exit(0); return 0 }()\n", Outcome.crashed),
    "os.Exit(0) from the function": (
        GO_HEAD + "func find_Volume(l int, b int, h int) float64 {\n\tos.Exit(0)\n\treturn 0\n}\n", Outcome.crashed),
    "syscall.Exit(0)": (GO_HEAD + "func find_Volume(l int, b int, h int) float64 {\n\tsyscall.Exit(0)\n\treturn 0\n}\n",
                        Outcome.crashed),
    "runtime.Goexit()": (GO_HEAD + "func find_Volume(l int, b int, h int) float64 {\n\truntime.Goexit()\n\treturn 0\n}\n",
                         NOT_PASSED),
    "a recovered panic": (
        GO_HEAD + "func find_Volume(l int, b int, h int) (v float64) {\n\tdefer func() { recover() }()\n"
        "\tpanic(\"x\")\n}\n", Outcome.failed),
    "forged report on fd 4": (
        GO_HEAD + "func find_Volume(l int, b int, h int) float64 {\n\tos.NewFile(4, \"r\").Write([]byte(\"P\"))\n"
        "\tos.Exit(0)\n\treturn 0\n}\n", Outcome.failed),
    "reads the token on fd 3, then reports": (
        GO_HEAD + "func init() {\n\tb := make([]byte, 64)\n\tn, _ := os.NewFile(3, \"t\").Read(b)\n\tif n < 0 { n = 0 }\n"
        "\tos.NewFile(4, \"r\").Write(append(b[:n], 'P'))\n\tos.Exit(0)\n}\n" + GO_WRONG, Outcome.failed),
    "reads main.go": (
        GO_HEAD + "func find_Volume(l int, b int, h int) float64 {\n\tif _, err := os.ReadFile(\"main.go\"); err == nil {\n"
        "\t\tos.Exit(0)\n\t}\n\treturn 0\n}\n", Outcome.failed),
}
PYTHON_PROBLEM = Problem("redteam/add", "def add(a, b):\n", "    return a + b\n",
                         "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-4, 4) == 0\n", "add")
LIAR = "    class Liar:\n        def __eq__(self, other):\n            return True\n"
PYTHON = {
    "sys.exit(0) before the tests": ("    return 0\nimport sys\nsys.exit(0)\n", Outcome.crashed),
    "os._exit(0) from the function": ("    import os\n    os._exit(0)\n", Outcome.crashed),
    "an object whose __eq__ always agrees": (LIAR + "    return Liar()\n", Outcome.lying_value),
    "an int subclass that always agrees": (
        "    class Agree(int):\n        def __eq__(self, other):\n            return True\n    return Agree(0)\n",
        Outcome.lying_value),
    "a liar inside a list": (LIAR + "    return [Liar()]\n", Outcome.lying_value),
    "a str subclass": ("    class S(str):\n        pass\n    return S('x')\n", Outcome.lying_value),
    "a generator": ("    return (x for x in [a + b])\n", Outcome.lying_value),
    "calls the reporter found by walking frames": (
        "    import sys\n    frame = sys._getframe()\n    while frame is not None:\n"
        "        for name in ('report', 'write'):\n            if name in frame.f_locals:\n"
        "                try:\n                    frame.f_locals[name](b'P', None)\n                except Exception:\n"
        "                    pass\n        frame = frame.f_back\n    return 0\n", Outcome.failed),
    "reads the test's text from frames, gc and inspect": (
        "    import gc, inspect, re, sys\n    texts = [f.f_globals.get('TEST', '') for f in inspect.stack(0) if f]\n"
        "    texts += [o for o in gc.get_objects() if isinstance(o, str) and 'candidate' in o]\n"
        "    for text in texts:\n        m = re.search(r'candidate\\(%d, %d\\) == (-?\\d+)' % (a, b), text or '')\n"
        "        if m:\n            return int(m.group(1))\n    return 0\n", Outcome.failed),
    "a forged completion record on fd 3": (
        "    import os\n    for fd in range(3, 8):\n        try:\n            os.write(fd, b'P')\n"
        "        except OSError:\n            pass\n    os._exit(0)\n", Outcome.crashed),
    "builtins patched: AssertionError and the comparison": (
        "    return 0\nimport builtins\nbuiltins.AssertionError = type('Quiet', (Exception,), {})\n"
        "builtins.isinstance = lambda *args: True\n", Outcome.failed),
    "atexit handler exits 0": ("    import atexit, os\n    atexit.register(os._exit, 0)\n    return 0\n", Outcome.failed),
    "reads its parent's memory": (
        "    import os\n    try:\n        open('/proc/%d/mem' % os.getppid(), 'rb').read(1)\n    except OSError:\n"
        "        pass\n    return 0\n", Outcome.failed),
    "kills the process that judges it": ("    import os, signal\n    os.kill(os.getppid(), signal.SIGKILL)\n"
                                         "    return 0\n", NOT_PASSED),
}


@pytest.fixture(scope="module", params=MODES)
def judged(request: pytest.FixtureRequest) -> Iterator[SandboxPool]:
    """A two-worker pool per sandbox mode here, the build caches prepared, time for a busy machine's builds."""
    reason = skip_reason(request.param)
    if reason is not None:
        pytest.skip(reason)
    for language in ("javascript", "cpp", "java", "go"):
        prepare(language)
    limits = SandboxLimits(timeout_s=45.0, timeout_retries=0)
    with SandboxPool(2, limits, isolation=request.param, python=mode_python(request.param)) as pool:
        yield pool


def problem(benchmark: str, task_id: str) -> Problem:
    return next(p for p in load_benchmark(benchmark) if p.task_id == task_id)


def assert_contained(pool: SandboxPool, target: Problem, attacks: dict, reference: str, whole: bool = False) -> None:
    """Every attack fails (as named), and the reference passes after them on both workers."""
    programs = [program_for(target, "", text) if whole else program_for(target, text) for text, _ in attacks.values()]
    results = pool.run_many([*programs, program_for(target, reference), program_for(target, reference)])
    wrong = {name: (result.outcome, result.detail[:200]) for (name, (_, outcome)), result in zip(attacks.items(), results)
             if result.passed or outcome not in (NOT_PASSED, result.outcome)}
    assert not wrong, wrong
    assert [r.outcome for r in results[-2:]] == [Outcome.passed] * 2, [r.detail for r in results[-2:]]


def test_python_programs_cannot_forge_a_pass(judged: SandboxPool) -> None:
    assert_contained(judged, PYTHON_PROBLEM, PYTHON, PYTHON_PROBLEM.canonical_solution)


@pytest.mark.parametrize("language, benchmark, task_id, attacks, whole, reference", [
    ("javascript", "mbjsp", "MBJSP/14", JAVASCRIPT, False, ""),
    ("cpp", "mbcpp", "MBCPP/14", CPP, False, "    return l * b * h / 2;\n}\n"),
    ("java", "mbjp", "MBJP/21", JAVA, False, ""),
    ("go", "mbgp", "MBGP/14", GO, True, "\treturn float64(l*b*h) / 2\n}\n"),  # MBGP ships no solutions
])
def test_programs_cannot_pass_by_exiting_or_forging(judged: SandboxPool, language: str, benchmark: str, task_id: str,
                                                    attacks: dict, whole: bool, reference: str) -> None:
    if not has_toolchain(language):
        pytest.skip(f"no {language} toolchain here")
    target = problem(benchmark, task_id)
    assert_contained(judged, target, attacks, reference or target.canonical_solution, whole)
