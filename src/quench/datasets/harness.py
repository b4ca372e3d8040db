"""Each MBXP language's test program, built so that a pass is a message the program cannot forge.

The launcher (quench.datasets.languages) draws a fresh random token per run and hands the
program's process two pipes: TOKEN_FD, from which the harness reads the token before any of the
program's own code runs (its write end is closed), and REPORT_FD, to which the harness writes
`token + "P"` after the last test. A run passes only when exactly that report arrived and the
process then exited with status 0: an exit before the report, however clean, is `crashed`, and
anything else written to REPORT_FD is `failed`. The token never appears in the program's text,
argv or environment.

Per language, what reads the token first and what keeps the harness out of the program's reach:
- C++: harness.cpp, a translation unit of its own linked first, reads the token from a
  `.preinit_array` entry (run before every constructor and static initializer of the program's)
  into storage with internal linkage; its `main` calls the test's `main`, renamed. In main.cpp,
  after the program, every identifier the test uses is `#undef`ined, so `#define throw ...` (or
  `main`, `if`, ...) in a completion never reaches the test; `assert` is defined afresh by
  <cassert> (NDEBUG undefined), and the standard's constants (INT_MAX, ...; no MBCPP test uses
  one) are left as they are, since the program's first include must stay the precompiled
  `bits/stdc++.h` (docs/languages.md) and nothing else restores them. The test's `compare` is
  renamed and compares with `std::equal_to<>`, so an `operator==` or a `compare` overload of the
  program's is not the one called.
- Go: harness.go, presented to the compiler before main.go: its package variable, initialised
  first (Go initialises in declaration order), holds the token under a name the program cannot
  know (a salt drawn per quench process); its `main` calls the test's, renamed.
- Java: a `main` put first into the test's class `Main` (the test's own renamed) reads the token
  into a local variable (out of reach of reflection) before any class of the program's is
  initialised; the test's `compare` asks the expected value's (a JDK class's) `equals`.
- JavaScript: runner.js reads the token, then runs main.js as a script (a top-level `return`
  cannot end it early) in which nothing of runner.js's scope is visible. In main.js, lodash is
  frozen before the program runs, and the test runs in a strict function of its own, so the
  program can neither replace `compare` or `_.isEqual` nor read the test's text through `caller`.
  The warm node host (quench.execution.node_host) runs the same main.js and answers the verdict
  itself; a program it declines (one naming `process`, ...) runs under runner.js.
C++ and Go sources are removed once built, and Main.java and main.js once their runtime has read
them, so the program cannot read the test's expected values from its own directory.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from typing import Callable

TOKEN_FD, REPORT_FD = 3, 4  # in the program's process
# Per quench process: names of the harness's that a program must not be able to name.
SALT = os.urandom(6).hex()
JS_RUNNER = "runner.js"
CPP_TESTS = "quench_tests"  # the test's `main`, renamed: a program that defines it does not link


@dataclass(frozen=True)
class Harnessed:
    """A program's files: what the launcher writes, runs, and removes once built."""

    files: tuple[tuple[str, str], ...]  # (name, text); the first is the program's own source
    remove_after_build: tuple[str, ...] = ()
    script: str = ""  # JavaScript: the file node starts (runner.js)


CPP_HARNESS = """#include <unistd.h>
namespace {
unsigned char report[80];
long length = -1;
void take_token(int, char**, char**) {
    long n = 0, got;
    while (n < 64 && (got = read(TOKEN_FD, report + n, 64 - n)) > 0) { n += got; }
    close(TOKEN_FD);
    report[n] = 'P';
    length = n + 1;
}
__attribute__((used, section(".preinit_array"))) void (*preinit)(int, char**, char**) = take_token;
}
int TESTS(int argc, char** argv);
int main(int argc, char** argv) {
    int status = TESTS(argc, argv);
    if (status == 0 && length > 1 && write(REPORT_FD, report, length) != length) { return 1; }
    return status;
}
"""
GO_HARNESS = """package main

import "os"

var TOKEN = READ()

func READ() []byte {
\ttoken, buffer := make([]byte, 0, 64), make([]byte, 64)
\tsource := os.NewFile(TOKEN_FD, "token")
\tfor len(token) < 64 {
\t\tn, err := source.Read(buffer)
\t\ttoken = append(token, buffer[:n]...)
\t\tif err != nil || n == 0 {
\t\t\tbreak
\t\t}
\t}
\tsource.Close()
\treturn append(token, 'P')
}

func main() {
\tTESTS()
\tif n, err := os.NewFile(REPORT_FD, "report").Write(TOKEN); err != nil || n != len(TOKEN) {
\t\tos.Exit(1)
\t}
}
"""
JAVA_MAIN = """
    public static void main(String[] args) throws Exception {
        java.io.FileInputStream source = new java.io.FileInputStream("/proc/self/fd/TOKEN_FD");
        byte[] token = new java.io.BufferedInputStream(source).readAllBytes();  // a pipe: no seeking
        source.close();
        java.io.FileOutputStream report = new java.io.FileOutputStream("/proc/self/fd/REPORT_FD");
        new java.io.File("Main.java").delete();
        quenchTests(args);
        report.write(token);
        report.write('P');
        report.close();
    }
"""
JS_RUNNER_TEXT = """'use strict';
const fs = require('fs');
const path = require('path');
const vm = require('vm');
const report = Buffer.concat([fs.readFileSync(TOKEN_FD), Buffer.from('P')]);
fs.closeSync(TOKEN_FD);
const writeSync = fs.writeSync;
const main = path.resolve('main.js');
const source = fs.readFileSync(main, 'utf8');
fs.unlinkSync(main);
Object.assign(globalThis, { require, module, exports: module.exports, __filename: main, __dirname: path.dirname(main) });
vm.runInThisContext(source, { filename: main });
if (writeSync(REPORT_FD, report) !== report.length) { throw new Error('the report was cut short'); }
"""
JS_PRELUDE = 'const quenchLodash = Object.freeze(require("lodash"));\n'
JS_LODASH = re.compile(r"""^const _ = require\(["']lodash["']\);?$""", re.MULTILINE)
# Macros of the standard library a test may use: not undefined. Names with two leading underscores
# (the compiler's own, which it warns against undefining) are not either; `assert` is CPP_ASSERT's.
CPP_CONSTANTS = {"INT_MAX", "INT_MIN", "UINT_MAX", "LONG_MAX", "LONG_MIN", "ULONG_MAX", "LLONG_MAX", "LLONG_MIN",
                 "ULLONG_MAX", "SHRT_MAX", "SHRT_MIN", "CHAR_MAX", "CHAR_MIN", "CHAR_BIT", "SIZE_MAX", "INT32_MAX",
                 "INT32_MIN", "INT64_MAX", "INT64_MIN", "UINT32_MAX", "UINT64_MAX", "DBL_MAX", "DBL_MIN",
                 "DBL_EPSILON", "FLT_MAX", "FLT_MIN", "FLT_EPSILON", "LDBL_MAX", "HUGE_VAL", "INFINITY", "NAN",
                 "M_PI", "M_E", "M_SQRT2", "NULL", "EOF", "RAND_MAX", "EXIT_SUCCESS", "EXIT_FAILURE"}
CPP_ASSERT = "#undef NDEBUG\n#undef assert\n#include <cassert>\n"
CPP_OPERATOR_NAMES = {"and", "and_eq", "bitand", "bitor", "compl", "not", "not_eq", "or", "or_eq", "xor", "xor_eq"}  # never macros


def renamed(pattern: str, replacement: "str | Callable[[re.Match[str]], str]", test: str, what: str) -> str:
    """`test` with the first match of `pattern` replaced; ValueError when the test has none."""
    result, count = re.subn(pattern, replacement, test, count=1, flags=re.MULTILINE)
    if count != 1:
        raise ValueError(f"the test has no {what} for the harness to call")
    return result


def fill(text: str, **names: str) -> str:
    """`text` with each placeholder (a whole word) replaced."""
    return re.sub(r"\b(" + "|".join(names) + r")\b", lambda match: names[match.group(1)], text)


def cpp_program(prompt: str, completion: str, test: str) -> Harnessed:
    """main.cpp (the program, then every identifier of the test undefined, then the test) and harness.cpp."""
    tests, compare = CPP_TESTS, f"quench_compare_{SALT}"
    test = renamed(r"\bint\s+main\s*\(", f"int {tests}(", test, "`int main(`")
    test = re.sub(r"\breturn a == b;", "return std::equal_to<>()(a, b);", re.sub(r"\bcompare\b", compare, test))
    names = {name for name in re.findall(r"[A-Za-z_]\w*", test) if not name.startswith("__")} - CPP_OPERATOR_NAMES - {"assert"}
    undefine = "".join(f"#undef {name}\n" for name in sorted(names - CPP_CONSTANTS))
    main = f"{prompt}{completion}\n{undefine}{CPP_ASSERT}{test}"
    return Harnessed((("main.cpp", main), ("harness.cpp", cpp_harness())), ("main.cpp", "harness.cpp"))


def cpp_harness() -> str:
    """harness.cpp: the same for every program, so the build cache may hold it compiled (CPP_HARNESS_OBJECT)."""
    return fill(CPP_HARNESS, TESTS=CPP_TESTS, TOKEN_FD=str(TOKEN_FD), REPORT_FD=str(REPORT_FD))


def go_program(prompt: str, completion: str, test: str) -> Harnessed:
    """main.go (the test's `main` renamed) and harness.go, which the compiler reads first."""
    tests = f"quenchTests_{SALT}"
    test = renamed(r"^func main\(\)", f"func {tests}()", test, "`func main()`")
    harness = fill(GO_HARNESS, TESTS=tests, TOKEN=f"quenchReport_{SALT}", READ=f"quenchToken_{SALT}",
                   TOKEN_FD=str(TOKEN_FD), REPORT_FD=str(REPORT_FD))
    return Harnessed((("main.go", prompt + completion + test), ("harness.go", harness)),
                     ("main.go", "harness.go", "main.o"))


def java_test(test: str) -> str:
    """The test's class `Main` with the harness's `main` first, its own renamed, and `compare`
    asking the expected value's `equals`."""
    test = renamed(r"public static void main\(String\[\] args\)", "private static void quenchTests(String[] args)",
                   test, "`public static void main(String[] args)`")
    test = test.replace("return obj1.equals(obj2);", "return obj2.equals(obj1);")
    harness = fill(JAVA_MAIN, TOKEN_FD=str(TOKEN_FD), REPORT_FD=str(REPORT_FD))
    return renamed(r"class Main\s*\{\n", lambda match: match.group(0) + harness, test, "`class Main {`")


def javascript_program(prompt: str, completion: str, test: str) -> Harnessed:
    """main.js (lodash frozen first, the test in a strict function of its own) and runner.js."""
    test = JS_LODASH.sub("const _ = quenchLodash;", test, count=1)
    main = f"{JS_PRELUDE}{prompt}{completion}\n;(function () {{\n'use strict';\n{test}\n}})();\n"
    runner = fill(JS_RUNNER_TEXT, TOKEN_FD=str(TOKEN_FD), REPORT_FD=str(REPORT_FD))
    return Harnessed((("main.js", main), (JS_RUNNER, runner)), script=JS_RUNNER)


# Where the build cache keeps harness.cpp compiled (quench.execution.toolchains), named after its text.
CPP_HARNESS_OBJECT = f"cpp/harness-{hashlib.sha256(cpp_harness().encode()).hexdigest()[:12]}.o"
