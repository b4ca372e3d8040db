"""quench's executor against mxeval's protocol on MBXP: identical verdicts, and throughput per language.

For each language the first `--problems` test problems are run twice each: the reference solution
(MBGP has none: a few written here) and a wrong one that compiles and fails its tests. The same
samples go through

- quench: `SandboxPool` (bubblewrap, nobody, no network, the limits of Python programs), with
  the shared read-only build cache (a precompiled `bits/stdc++.h`) and Java's single-JVM
  source launcher;
- mxeval: `mxeval.execution.check_correctness_*` when the `mxeval` package is importable (it is
  not on PyPI: install it from amazon-science/mxeval), else the same commands mxeval runs
  (`node x.js`; `go run x.go`; `g++ x.cpp -o x` then `./x`; `javac` then `java -cp . Main`), each
  sample in a fresh temporary directory, unsandboxed, from a thread pool of the same size.

Printed per language: samples, verdict agreement, programs per second of each and the ratio.
Pool start-up and preparing the build cache are done before the clock starts (once per run and
once per machine). Run: `.venv/bin/python benchmarks/mxeval_compare.py --problems 20 --workers 2`.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from quench.datasets import LANGUAGES, Problem, load_benchmark
from quench.datasets.languages import NODE_PATH
from quench.execution import SandboxLimits, SandboxPool
from quench.execution.toolchains import has_toolchain, prepare

GO_SOLUTIONS = {  # MBGP ships no reference solutions
    "MBGP/11": "\tb := []byte(s)\n\tfor i := 0; i < len(b); i++ {\n\t\tif b[i] == ch[0] {\n\t\t\tb = append(b[:i:i], b[i+1:]...)\n"
               "\t\t\tbreak\n\t\t}\n\t}\n\tfor i := len(b) - 1; i >= 0; i-- {\n\t\tif b[i] == ch[0] {\n"
               "\t\t\tb = append(b[:i:i], b[i+1:]...)\n\t\t\tbreak\n\t\t}\n\t}\n\treturn string(b)\n}\n",
    "MBGP/12": "\tsum := func(row []int) int {\n\t\ttotal := 0\n\t\tfor _, v := range row {\n\t\t\ttotal += v\n\t\t}\n"
               "\t\treturn total\n\t}\n\tsort.Slice(M, func(i, j int) bool { return sum(M[i]) < sum(M[j]) })\n\treturn M\n}\n",
}
ENV = {**os.environ, "NODE_PATH": NODE_PATH}  # mxeval expects lodash where node finds it
WRONG = {  # compiles, then fails the first test case
    "javascript": "    throw new Error('wrong');\n}\n",
    "go": '\tpanic("wrong")\n}\n',
    "cpp": "    throw runtime_error(\"wrong\");\n}\n",
    "java": '        throw new RuntimeException("wrong");\n    }\n}\n',
}


def samples(benchmark: str, language: str, count: int) -> list[tuple[Problem, str]]:
    """(problem, completion): references (where given) and a wrong answer per problem."""
    problems = load_benchmark(benchmark)
    if language == "go":
        chosen = problems[:count]
        right = [(p, GO_SOLUTIONS[p.task_id]) for p in chosen if p.task_id in GO_SOLUTIONS]
    else:
        chosen = [p for p in problems if p.canonical_solution][:count]
        right = [(p, p.canonical_solution) for p in chosen]
    return right + [(p, WRONG[language]) for p in chosen]


def run_quench(pool: SandboxPool, cases: list[tuple[Problem, str]]) -> tuple[list[bool], float]:
    start = time.perf_counter()
    results = pool.run_many([problem.program(completion) for problem, completion in cases])
    return [result.passed for result in results], time.perf_counter() - start


def mxeval_commands(language: str, directory: str) -> tuple[str, list[list[str]], list[str]]:
    """mxeval's file name, build commands and run command for one language."""
    if language == "javascript":
        return "x.js", [], ["node", "x.js"]
    if language == "go":
        return "x.go", [], ["go", "run", "x.go"]
    if language == "cpp":
        return "x.cpp", [["g++", "x.cpp", "-o", "x_cpp"]], ["./x_cpp"]
    return "main.java", [["javac", "main.java"]], ["java", "-cp", directory, "Main"]


def mxeval_protocol(language: str, problem: Problem, completion: str, timeout: float) -> bool:
    """One sample as mxeval runs it: prompt + completion + test, built and run in a fresh directory."""
    with tempfile.TemporaryDirectory() as directory:
        name, builds, command = mxeval_commands(language, directory)
        with open(os.path.join(directory, name), "w", encoding="utf-8") as handle:
            handle.write(problem.prompt + completion + problem.test)
        try:
            for build in builds:
                if subprocess.run(build, cwd=directory, capture_output=True, timeout=100, env=ENV).returncode != 0:
                    return False
            return subprocess.run(command, cwd=directory, capture_output=True, timeout=timeout, env=ENV).returncode == 0
        except subprocess.TimeoutExpired:
            return False


def mxeval_one(language: str, problem: Problem, completion: str, timeout: float) -> bool:
    if importlib.util.find_spec("mxeval") is None:
        return mxeval_protocol(language, problem, completion, timeout)
    from mxeval import execution  # type: ignore[import-not-found]

    check = getattr(execution, f"check_correctness_{language}")
    row = {"task_id": problem.task_id, "prompt": problem.prompt, "test": problem.test, "entry_point": problem.entry_point}
    return bool(check(row, completion, timeout)["passed"])


def run_mxeval(language: str, cases: list[tuple[Problem, str]], workers: int, timeout: float) -> tuple[list[bool], float]:
    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as threads:
        verdicts = list(threads.map(lambda case: mxeval_one(language, case[0], case[1], timeout), cases))
    return verdicts, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--problems", type=int, default=20, help="test problems per language")
    parser.add_argument("--workers", type=int, default=2, help="parallel programs, both executors")
    parser.add_argument("--timeout", type=float, default=15.0, help="seconds per program (build and run)")
    parser.add_argument("--languages", default="javascript,go,cpp,java")
    args = parser.parse_args()
    source = "mxeval package" if importlib.util.find_spec("mxeval") else "mxeval's commands (package not installed)"
    print(f"quench SandboxPool (bwrap) vs {source}; {args.workers} workers, {args.problems} problems per language")
    print(f"{'language':<11} {'samples':>7} {'agree':>7} {'quench/s':>9} {'mxeval/s':>9} {'ratio':>6}")
    with SandboxPool(args.workers, SandboxLimits(timeout_s=args.timeout), isolation="bwrap") as pool:
        for language in args.languages.split(","):
            if not has_toolchain(language):
                print(f"{language:<11} skipped: no toolchain here")
                continue
            prepare(language)
            cases = samples(LANGUAGES[language].benchmark, language, args.problems)
            ours, ours_s = run_quench(pool, cases)
            theirs, theirs_s = run_mxeval(language, cases, args.workers, args.timeout)
            agree = sum(a == b for a, b in zip(ours, theirs)) / len(cases)
            rate_ours, rate_theirs = len(cases) / ours_s, len(cases) / theirs_s
            print(f"{language:<11} {len(cases):>7} {agree:>7.1%} {rate_ours:>9.2f} {rate_theirs:>9.2f} "
                  f"{rate_ours / rate_theirs:>5.2f}x  (passed: quench {sum(ours)}, mxeval {sum(theirs)})")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
