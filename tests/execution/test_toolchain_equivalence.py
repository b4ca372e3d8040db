"""Every build shortcut equals the plain toolchain.

The shortcuts (the precompiled `bits/stdc++.h`, Java's class-data archive, Go's direct compile and
link, node's start-up snapshot and the warm node host) must give each program the verdict, exit
status and diagnostics that the plain toolchain gives it: `g++ main.cpp -o main`, `java Main.java`,
`go build` with an empty build cache, `node main.js` (and `node --check main.js`), run here in a
temporary directory with no cache at all. Programs: MBXP's canonical solutions (MBGP ships none:
benchmarks/mxeval_compare.py's), and mutants of a few of them (duplicate and reordered includes and
imports, unusual but valid headers, truncated programs, wrong answers). The default part runs a
seeded sample; the full set is marked `full` (`make test-full`).

Runs in "bwrap" mode; a language whose toolchain this machine lacks is skipped.
"""

from __future__ import annotations

import importlib.util
import random
import re
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import pytest
from sandbox_helpers import skip_reason

from quench.datasets import LANGUAGES, load_benchmark
from quench.datasets.languages import JAVA_COMPILE_MARK, JAVA_FLAGS, NODE_PATH, launcher
from quench.execution import ExecutionResult, SandboxLimits, SandboxPool
from quench.execution.sandbox import HOST_VAR
from quench.execution.toolchains import has_toolchain, prepare

COMPARISON = Path(__file__).resolve().parents[2] / "benchmarks" / "mxeval_compare.py"
SEED = 41
# Per language in the default suite: the plain C++ and Java builds cost about a second of CPU each.
SAMPLE = {"javascript": 40, "go": 30, "cpp": 6, "java": 6}
MUTATED_PROBLEMS = 1  # references whose mutants are checked in the default suite
FULL_MUTATED_PROBLEMS = 10  # ... and in the slow one, beside every reference
HEAD_BYTES = 280  # what the launcher keeps of a build's or run's error output
PLAIN_TIMEOUT_S = 120
SCRATCH_PATH = re.compile(r"(?:/[^\s/:'\"()]+)+/(?=(?:main\.(?:js|go|cpp)|Main\.java)\b)")
ERROR_LINE = re.compile(r"^\w*(?:Error|Exception)\b.*$|^Uncaught .*$", re.MULTILINE)


@dataclass(frozen=True)
class Verdict:
    """What a program came to: the outcome and its detail (exit status and diagnostics)."""

    outcome: str  # "passed", "failed", "compile_error", ...
    detail: str  # scratch-directory paths removed


def normalized(detail: str) -> str:
    """The detail without the scratch directory's path, nor the launcher's line number."""
    return re.sub(r" \(line \d+\)$", "", SCRATCH_PATH.sub("", detail.strip()))


def sandboxed(result: ExecutionResult) -> Verdict:
    return Verdict(result.outcome.value, normalized(result.detail))


def same(got: Verdict, want: Verdict) -> bool:
    """Equal verdicts; details cut at HEAD_BYTES of text whose paths differ in length agree up to the shorter."""
    shorter = min(len(got.detail), len(want.detail))
    cut_alike = len(got.detail) == len(want.detail) or shorter >= HEAD_BYTES // 2
    return got.outcome == want.outcome and got.detail[:shorter] == want.detail[:shorter] and cut_alike


# --- the plain toolchains ------------------------------------------------------------------------


def head(data: bytes) -> str:
    return data[:HEAD_BYTES].decode("utf-8", "replace").strip()


def failed(status: int, stderr: bytes) -> Verdict:
    how = f"killed by signal {-status}" if status < 0 else f"exit status {status}"
    text = head(stderr)
    return Verdict("failed", normalized(f"{how}: {text}" if text else how))


def step(argv: list[str], cwd: str, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, timeout=PLAIN_TIMEOUT_S, check=False)


def plain_env(scratch: str) -> dict[str, str]:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": scratch, "NODE_PATH": NODE_PATH,
            "GOCACHE": f"{scratch}/gocache", "GOPATH": f"{scratch}/gopath", "GO111MODULE": "off",
            "CGO_ENABLED": "0", "GOFLAGS": ""}


def built_and_run(build: list[str], source_name: str) -> Callable[[str, str, dict[str, str]], Verdict]:
    def run(source: str, scratch: str, env: dict[str, str]) -> Verdict:
        Path(scratch, source_name).write_text(source, encoding="utf-8")
        done = step(build, scratch, env)
        if done.returncode != 0:
            return Verdict("compile_error", normalized(head(done.stderr)))
        ran = step(["./main"], scratch, env)
        return failed(ran.returncode, ran.stderr) if ran.returncode else Verdict("passed", "")
    return run


def plain_java(source: str, scratch: str, env: dict[str, str]) -> Verdict:
    Path(scratch, "Main.java").write_text(source, encoding="utf-8")
    ran = step(["java", *JAVA_FLAGS, "Main.java"], scratch, env)
    if ran.returncode and JAVA_COMPILE_MARK in ran.stderr.decode("utf-8", "replace")[-200:]:
        return Verdict("compile_error", normalized(head(ran.stderr)))
    return failed(ran.returncode, ran.stderr) if ran.returncode else Verdict("passed", "")


def plain_node(source: str, scratch: str, env: dict[str, str]) -> Verdict:
    Path(scratch, "main.js").write_text(source, encoding="utf-8")
    ran = step(["node", "main.js"], scratch, env)
    if not ran.returncode:
        return Verdict("passed", "")
    check = step(["node", "--check", "main.js"], scratch, env)
    return Verdict("compile_error", normalized(head(check.stderr))) if check.returncode else failed(ran.returncode,
                                                                                                      ran.stderr)


PLAIN = {
    "cpp": built_and_run(["g++", "main.cpp", "-o", "main"], "main.cpp"),
    "go": built_and_run(["go", "build", "-o", "main", "main.go"], "main.go"),
    "java": plain_java,
    "javascript": plain_node,
}


def plain(language: str, source: str) -> Verdict:
    """The verdict of the plain toolchain, in a fresh temporary directory, no cache anywhere."""
    with tempfile.TemporaryDirectory(prefix="quench-plain-") as scratch:
        return PLAIN[language](source, scratch, plain_env(scratch))


# --- the programs --------------------------------------------------------------------------------


def go_solutions() -> dict[str, str]:
    spec = importlib.util.spec_from_file_location("mxeval_compare", COMPARISON)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.go_solutions()


def references(language: str) -> list[tuple[str, str]]:
    """(name, source) of every canonical solution of the language's benchmark, all splits."""
    problems = load_benchmark(LANGUAGES[language].benchmark, split="all")
    if language == "go":
        known = go_solutions()
        return [(p.task_id, p.source(known[p.task_id])) for p in problems if p.task_id in known]
    return [(p.task_id, p.source(p.canonical_solution)) for p in problems if p.canonical_solution]


CPP_HEADER = "#include <bits/stdc++.h>\n"
MUTANTS: dict[str, dict[str, Callable[[str], str]]] = {
    "cpp": {
        "bits/stdc++.h twice": lambda s: s.replace(CPP_HEADER, CPP_HEADER * 2, 1),
        "cstdio before it": lambda s: "#include <cstdio>\n" + s,
        "pragma once": lambda s: "#pragma once\n" + s,
        "using namespace std twice": lambda s: s.replace("using namespace std;", "using namespace std;\n" * 2, 1),
        "a comment first": lambda s: "// the answer\n" + s,
        "quoted header": lambda s: s.replace("<bits/stdc++.h>", '"bits/stdc++.h"', 1),
        "a macro first": lambda s: "#define _GLIBCXX_ASSERTIONS 1\n" + s,
        "the header again at the end": lambda s: s + "\n" + CPP_HEADER,
        "no header": lambda s: s.replace(CPP_HEADER, "", 1),
        "a header twice, one quoted": lambda s: s.replace(CPP_HEADER, CPP_HEADER + '#include "bits/stdc++.h"\n', 1),
        "throws": lambda s: re.sub(r"(int main\([^)]*\)\s*\{)", r'\1 throw std::runtime_error("wrong");', s, count=1),
        "exit status 3": lambda s: re.sub(r"(int main\([^)]*\)\s*\{)", r"\1 if (argc > 0) return 3;", s, count=1),
    },
    "java": {
        "duplicate wildcard import": lambda s: "import java.util.*;\n" + s,
        "explicit and wildcard import": lambda s: "import java.util.List;\n" + s,
        "java.lang imported": lambda s: "import java.lang.String;\n" + s,
        "unused import": lambda s: "import java.util.concurrent.*;\n" + s,
        "exit status 3": lambda s: s.replace("public static void main(String[] args) throws Exception {",
                                             "public static void main(String[] args) throws Exception {\n"
                                             "        if (args.length == 0) System.exit(3);", 1),
        "unknown import": lambda s: "import java.nothing.Here;\n" + s,
    },
    "go": {
        "unused import": lambda s: s.replace("import (", 'import (\n\t"os"', 1),
        "duplicate import": lambda s: re.sub(r'import \(\n(\t"[^"]+"\n)', r"import (\n\1\1", s, count=1),
        "blank import": lambda s: s.replace("import (", 'import (\n\t_ "strings"', 1),
        "panics": lambda s: s.replace("func main() {", 'func main() {\n\tpanic("wrong")', 1),
    },
    "javascript": {
        "use strict": lambda s: "'use strict';\n" + s,
        "lodash required again": lambda s: "const _ = require('lodash');\n" + s,
        "process.exit(3)": lambda s: s + "\nprocess.exit(3);\n",
        "throws": lambda s: s + "\nthrow new Error('wrong');\n",
    },
}
TRUNCATIONS = (0.3, 0.5, 0.8)  # fractions of the program kept: compile errors, mostly


def mutants(language: str, sources: list[tuple[str, str]]) -> list[tuple[str, str]]:
    cases = []
    for task_id, text in sources:
        cases += [(f"{task_id} {name}", mutate(text)) for name, mutate in MUTANTS[language].items()]
        cases += [(f"{task_id} cut at {cut:.0%}", text[:int(len(text) * cut)]) for cut in TRUNCATIONS]
    return cases


def programs(language: str, full: bool) -> list[tuple[str, str]]:
    """The default suite's seeded sample, or every reference; mutants of the first references either way."""
    every = references(language)
    mutated = mutants(language, every[:FULL_MUTATED_PROBLEMS if full else MUTATED_PROBLEMS])
    if full:
        return every + mutated
    return random.Random(SEED).sample(every, min(SAMPLE[language], len(every))) + mutated


# --- the comparison ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pool() -> Iterator[SandboxPool]:
    """A bubblewrap pool with every build cache prepared; programs get a minute (a failed prepared build
    is redone plainly)."""
    reason = skip_reason("bwrap")
    if reason is not None:
        pytest.skip(reason)
    for language in LANGUAGES:
        prepare(language)
    with SandboxPool(2, SandboxLimits(timeout_s=60.0), isolation="bwrap") as sandbox:
        yield sandbox


@pytest.fixture()
def hostless_pool(pool: SandboxPool, monkeypatch: pytest.MonkeyPatch) -> Iterator[SandboxPool]:
    """The same without the warm node host, for one test (a worker reads the switch whenever it starts):
    each JavaScript program starts node from the snapshot."""
    monkeypatch.setenv(HOST_VAR, "0")
    with SandboxPool(2, SandboxLimits(timeout_s=60.0), isolation="bwrap") as sandbox:
        yield sandbox


def error_line(detail: str) -> str:
    """The thrown error's line (`Error: wrong`), which the host words as node does."""
    found = ERROR_LINE.findall(detail)
    return found[-1].strip() if found else ""


def exit_part(verdict: Verdict) -> str:
    return verdict.detail.split(":", 1)[0] if verdict.outcome == "failed" else ""


def differences(language: str, cases: list[tuple[str, str]], pool: SandboxPool,
                words_only: bool = False) -> list[str]:
    """Each case whose sandboxed verdict differs from the plain toolchain's, with both."""
    results = pool.run_many([launcher(language, text) for _, text in cases])
    with ThreadPoolExecutor(2) as workers:
        expected = list(workers.map(lambda case: plain(language, case[1]), cases))
    found = []
    for (name, _), result, want in zip(cases, results, expected):
        got = sandboxed(result)
        if words_only and want.outcome == "failed":  # the host words it `main.js:<line>`, the line, the error
            agree = (got.outcome, exit_part(got), error_line(got.detail)) == (want.outcome, exit_part(want),
                                                                              error_line(want.detail))
        else:
            agree = same(got, want)
        if not agree:
            found.append(f"{name}: sandboxed {got}, plain {want}")
    return found


def check(language: str, pool: SandboxPool, full: bool, words_only: bool = False) -> None:
    if not has_toolchain(language):
        pytest.skip(f"no {language} toolchain here")
    cases = programs(language, full)
    found = differences(language, cases, pool, words_only)
    assert not found, f"{len(found)} of {len(cases)} differ:\n" + "\n".join(found)


@pytest.mark.parametrize("language", ["cpp", "java", "go"])
def test_a_sample_and_its_mutants_build_and_run_as_under_the_plain_toolchain(pool: SandboxPool, language: str) -> None:
    check(language, pool, full=False)


def test_javascript_from_the_snapshot_as_under_plain_node(hostless_pool: SandboxPool) -> None:
    check("javascript", hostless_pool, full=False)


def test_javascript_in_the_host_as_under_plain_node(pool: SandboxPool) -> None:
    check("javascript", pool, full=False, words_only=True)


@pytest.mark.full
@pytest.mark.parametrize("language", ["cpp", "java", "go"])
def test_every_reference_and_mutant_as_under_the_plain_toolchain(pool: SandboxPool, language: str) -> None:
    check(language, pool, full=True)


@pytest.mark.full
def test_every_javascript_reference_and_mutant_from_the_snapshot_as_under_plain_node(hostless_pool: SandboxPool) -> None:
    check("javascript", hostless_pool, full=True)


@pytest.mark.full
def test_every_javascript_reference_and_mutant_in_the_host_as_under_plain_node(pool: SandboxPool) -> None:
    check("javascript", pool, full=True, words_only=True)
