"""quench's executor against mxeval's on MBXP: identical verdicts, and throughput per language.

    PYTHONPATH=/path/to/mxeval .venv/bin/python benchmarks/mxeval_compare.py --problems 20 --workers 2 --repeats 2

For each language the first `--problems` test problems are run as two samples each where a
solution is known: the reference solution (MBGP ships none: the Go solutions below) and a wrong
answer that compiles and fails the first test case. The same samples go through

- quench: `SandboxPool` (bubblewrap, nobody, no network, the limits of Python programs), with the
  shared read-only build cache (the precompiled `bits/stdc++.h`, Java's class-data archive, node's
  start-up snapshot with lodash loaded) and each worker's warm node that runs JavaScript programs in
  fresh contexts, and the wall clock mxeval allows (`--timeout`, plus mxeval's 100 s for C++'s and Java's compiler);
- mxeval, in one of two modes, printed on the first line of the output:
  - "mxeval package": `mxeval.execution.check_correctness_<language>` itself, when the package is
    importable. It is not on PyPI: put a checkout of amazon-science/mxeval (or its
    `mxeval/execution.py` in an `mxeval/` directory) on PYTHONPATH. It writes its files under its
    own package directory.
  - "mxeval replica": without the package, `mxeval_replica` below runs what `check_correctness_*`
    runs: the program `prompt + completion + test` written to a uniquely named file in a
    `<language>_exec_eval` directory (C++'s is `c#_exec_eval`, as in mxeval); JavaScript `node
    <path>.js`; Go `go run <path>.go`; C++ `g++ <name>.cpp -o <name>_cpp` then `./<name>_cpp`, both
    in that directory; Java `javac <dir>/main.java` then `java -cp <dir> Main` (run even when javac
    failed, as mxeval does); output captured as text; builds limited to 100 s and runs to
    `int(--timeout)` s; the file, binary or directory removed afterwards.
  Either way unsandboxed, with the caller's environment (mxeval's Go uses the user's Go build
  cache) plus NODE_PATH pointing at Debian's lodash (mxeval's setup installs lodash with npm),
  from a thread pool of `--workers` threads, as `evaluate_functional_correctness` runs it. One
  variable is taken out of that environment unless `--inherit-node-ca-certs` is given:
  NODE_EXTRA_CA_CERTS, a certificate bundle that every node start parses (about 45 ms of CPU per
  program), which quench's sandbox environment does not carry; the header line says which.

Printed per language and repeat: samples, verdict agreement, programs per second of each and the
ratio, then CPU milliseconds per program of each (quench: the pool's processes and all they ran;
mxeval: the commands it ran) and their ratio, which a shared machine's load moves less. Before the clock starts: the pool's start-up, preparing the build cache, and one untimed
sample through each executor. Repeats alternate which executor goes first, so a shared machine's
load falls on both alike. The figures in docs/languages.md were measured in "mxeval package" mode.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import math
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from quench.datasets import LANGUAGES, Problem, load_benchmark
from quench.datasets.languages import NODE_PATH
from quench.execution import ExecutionResult, SandboxLimits, SandboxPool
from quench.execution.toolchains import has_toolchain, prepare

# MBGP ships no reference solutions: correct ones for its first test problems (written with four
# spaces, indented with tabs by `gofmt_indent`). Every one passes under both executors.
GO_SOLUTIONS = {
    "MBGP/11": """\
    b := []byte(s)
    for i := 0; i < len(b); i++ {
        if b[i] == ch[0] {
            b = append(b[:i:i], b[i+1:]...)
            break
        }
    }
    for i := len(b) - 1; i >= 0; i-- {
        if b[i] == ch[0] {
            b = append(b[:i:i], b[i+1:]...)
            break
        }
    }
    return string(b)
}
""",
    "MBGP/12": """\
    sum := func(row []int) int {
        total := 0
        for _, v := range row {
            total += v
        }
        return total
    }
    sort.Slice(M, func(i, j int) bool { return sum(M[i]) < sum(M[j]) })
    return M
}
""",
    "MBGP/14": "    return float64(l*b*h) / 2\n}\n",
    "MBGP/17": "    return 4 * a\n}\n",
    "MBGP/18": """\
    dirty := map[rune]bool{}
    for _, c := range second_string {
        dirty[c] = true
    }
    kept := []rune{}
    for _, c := range string0 {
        if !dirty[c] {
            kept = append(kept, c)
        }
    }
    return string(kept)
}
""",
    "MBGP/19": """\
    seen := map[int]bool{}
    for _, n := range arraynums {
        if seen[n] {
            return true
        }
        seen[n] = true
    }
    return false
}
""",
    "MBGP/20": """\
    if x%2 == 0 {
        return false
    }
    if x == 1 {
        return true
    }
    x++
    p := 0
    for x%2 == 0 {
        x /= 2
        p++
        if p == x {
            return true
        }
    }
    return false
}
""",
    "MBGP/21": """\
    out := make([]int, 0, m)
    for i := 1; i <= m; i++ {
        out = append(out, i*n)
    }
    return out
}
""",
    "MBGP/22": """\
    seen := map[int]bool{}
    for _, n := range nums {
        if seen[n] {
            return n
        }
        seen[n] = true
    }
    return -1
}
""",
    "MBGP/23": """\
    best := -1 << 62
    for _, row := range list1 {
        total := 0
        for _, v := range row {
            total += v
        }
        if total > best {
            best = total
        }
    }
    return best
}
""",
    "MBGP/24": """\
    decimal, place := 0, 1
    for binary > 0 {
        decimal += binary % 10 * place
        place *= 2
        binary /= 10
    }
    return decimal
}
""",
    "MBGP/28": """\
    if k > n-k {
        k = n - k
    }
    result := 1
    for i := 0; i < k; i++ {
        result = result * (n - i) / (i + 1)
    }
    return result
}
""",
    "MBGP/29": """\
    odd := 0
    for _, v := range arr[:arr_size] {
        odd ^= v
    }
    return odd
}
""",
    "MBGP/30": """\
    count := 0
    for i := 0; i < len(s); i++ {
        for j := i; j < len(s); j++ {
            if s[i] == s[j] {
                count++
            }
        }
    }
    return count
}
""",
    "MBGP/33": """\
    binary, place := 0, 1
    for N > 0 {
        binary += N % 2 * place
        place *= 10
        N /= 2
    }
    return binary
}
""",
}
WRONG = {  # compiles, then fails the first test case
    "javascript": "    throw new Error('wrong');\n}\n",
    "go": '\tpanic("wrong")\n}\n',
    "cpp": "    throw runtime_error(\"wrong\");\n}\n",
    "java": '        throw new RuntimeException("wrong");\n    }\n}\n',
}
BUILD_TIMEOUT_S = 100  # mxeval's compile_timeout
CA_CERTS_VAR = "NODE_EXTRA_CA_CERTS"
Case = tuple[Problem, str]


def gofmt_indent(text: str) -> str:
    """Leading groups of four spaces as tabs, as gofmt indents."""
    return re.sub(r"(?m)^((?:    )+)", lambda match: "\t" * (len(match.group(1)) // 4), text)


def go_solutions() -> dict[str, str]:
    """Task id → a correct MBGP completion."""
    return {task_id: gofmt_indent(body) for task_id, body in GO_SOLUTIONS.items()}


def samples(language: str, count: int) -> list[Case]:
    """(problem, completion): the known solutions of the first `count` test problems, then a wrong answer each."""
    problems = load_benchmark(LANGUAGES[language].benchmark)
    if language == "go":
        known = go_solutions()
        chosen = problems[:count]
        right = [(p, known[p.task_id]) for p in chosen if p.task_id in known]
    else:
        chosen = [p for p in problems if p.canonical_solution][:count]
        right = [(p, p.canonical_solution) for p in chosen]
    return right + [(p, WRONG[language]) for p in chosen]


def mxeval_module_path() -> str | None:
    """Where the importable `mxeval` package lives, or None."""
    spec = importlib.util.find_spec("mxeval")
    if spec is None:
        return None
    return str(spec.submodule_search_locations[0] if spec.submodule_search_locations else spec.origin)


class MxevalReplica:
    """mxeval's `check_correctness_*` for one language, run the same way without the package."""

    def __init__(self, language: str, root: str) -> None:
        self.language = language
        folder = "c#" if language == "cpp" else language  # mxeval's C++ helper is called with language="c#"
        self.directory = os.path.join(root, f"{folder}_exec_eval")
        os.makedirs(self.directory, exist_ok=True)
        self.names = itertools.count()
        self.lock = threading.Lock()

    def unique_base(self) -> str:
        with self.lock:
            return os.path.join(self.directory, f"sample{next(self.names)}")

    def __call__(self, problem: Problem, completion: str, timeout: float) -> bool:
        program = problem.prompt + completion + problem.test
        base = self.unique_base()
        if self.language == "java":
            return self.java(base, program, timeout)
        extension = {"javascript": ".js", "go": ".go", "cpp": ".cpp"}[self.language]
        with open(base + extension, "w") as handle:
            handle.write(program)
        name = os.path.basename(base)
        try:
            if self.language == "cpp":
                built = capture(["g++", f"{name}.cpp", "-o", f"{name}_cpp"], BUILD_TIMEOUT_S, self.directory)
                return built == 0 and capture([f"./{name}_cpp"], int(timeout), self.directory) == 0
            command = ["node", base + ".js"] if self.language == "javascript" else ["go", "run", base + ".go"]
            return capture(command, int(timeout), None) == 0
        except Exception:  # noqa: BLE001 - mxeval counts any failure to run as not passed
            return False
        finally:
            for leftover in (base + extension, base + "_cpp"):
                if os.path.exists(leftover):
                    os.remove(leftover)

    def java(self, base: str, program: str, timeout: float) -> bool:
        os.makedirs(base)
        path = os.path.join(base, "main.java")
        with open(path, "w") as handle:
            handle.write(program)
        try:
            built = capture(["javac", path], BUILD_TIMEOUT_S, None)
            ran = capture(["java", "-cp", base, "Main"], int(timeout), None)  # mxeval runs it whatever javac said
            return built == 0 and ran == 0
        except Exception:  # noqa: BLE001
            return False
        finally:
            shutil.rmtree(base, ignore_errors=True)


def capture(argv: list[str], timeout: float, cwd: str | None) -> int:
    """Exit status of `argv`, output captured as text (as mxeval's subprocess.run calls)."""
    return subprocess.run(argv, timeout=timeout, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          cwd=cwd, check=False).returncode


def mxeval_checker(language: str, root: str) -> Callable[[Problem, str, float], bool]:
    """The mxeval verdict of one sample: the package's function when importable, else the replica."""
    if mxeval_module_path() is None:
        return MxevalReplica(language, root)
    from mxeval import execution  # type: ignore[import-not-found]

    check = getattr(execution, f"check_correctness_{language}")

    def checked(problem: Problem, completion: str, timeout: float) -> bool:
        row = {"task_id": problem.task_id, "prompt": problem.prompt, "test": problem.test,
               "entry_point": problem.entry_point}
        return bool(check(row, completion, timeout)["passed"])

    return checked


def process_tree_cpu_s(roots: list[int]) -> float:
    """CPU seconds of these processes, their living descendants and the descendants they reaped."""
    total, stack, tick = 0.0, list(roots), os.sysconf("SC_CLK_TCK")
    while stack:
        pid = stack.pop()
        try:
            with open(f"/proc/{pid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/task/{pid}/children") as handle:
                stack += [int(child) for child in handle.read().split()]
        except OSError:
            continue
        total += sum(int(value) for value in fields[11:15]) / tick  # utime, stime, cutime, cstime
    return total


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_quench(pool: SandboxPool, cases: list[Case]) -> tuple[list[ExecutionResult], float, float]:
    """Results, wall seconds and CPU seconds (the pool's processes and everything they ran; NaN when
    a worker was replaced meanwhile, which takes its CPU time with it)."""
    workers = pool.worker_pids()
    cpu, start = process_tree_cpu_s(workers), time.perf_counter()
    results = pool.run_many([problem.program(completion) for problem, completion in cases])
    wall = time.perf_counter() - start
    used = process_tree_cpu_s(workers) - cpu if pool.worker_pids() == workers else math.nan
    return results, wall, used


def run_mxeval(check: Callable[[Problem, str, float], bool], cases: list[Case], workers: int,
               timeout: float) -> tuple[list[bool], float, float]:
    """Verdicts, wall seconds and CPU seconds (the commands mxeval ran)."""
    cpu, start = children_cpu_s(), time.perf_counter()
    with ThreadPoolExecutor(workers) as threads:
        verdicts = list(threads.map(lambda case: check(case[0], case[1], timeout), cases))
    return verdicts, time.perf_counter() - start, children_cpu_s() - cpu


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--problems", type=int, default=20, help="test problems per language")
    parser.add_argument("--workers", type=int, default=2, help="parallel programs, both executors")
    parser.add_argument("--timeout", type=float, default=15.0, help="seconds per program run (mxeval's timeout)")
    parser.add_argument("--repeats", type=int, default=2, help="measurements per language, printed one by one")
    parser.add_argument("--languages", default="javascript,go,cpp,java")
    parser.add_argument("--inherit-node-ca-certs", action="store_true",
                        help="leave NODE_EXTRA_CA_CERTS in mxeval's environment (each node start then parses that bundle)")
    args = parser.parse_args(argv)
    for name in ("problems", "workers", "repeats"):
        if getattr(args, name) < 1:
            parser.exit(2, f"error: --{name} must be at least 1, got {getattr(args, name)}\n")
    if not args.timeout > 0:
        parser.exit(2, f"error: --timeout must be positive, got {args.timeout}\n")
    unknown = [name for name in args.languages.split(",") if name not in LANGUAGES]
    if unknown:
        parser.exit(2, f"error: --languages: unknown {', '.join(unknown)} (choose from {', '.join(LANGUAGES)})\n")
    return args


def quench_limits(language: str, timeout: float) -> SandboxLimits:
    """The wall clock mxeval allows a program: `timeout` for the run (Go's `go run` builds within
    it), plus its 100 s for the compiler where a separate compiler runs (C++, Java). quench's limit
    covers build and run together."""
    return SandboxLimits(timeout_s=timeout + (BUILD_TIMEOUT_S if language in ("cpp", "java") else 0))


def compare(language: str, args: argparse.Namespace, root: str) -> None:
    """Print one row per repeat for `language`."""
    prepare(language)
    with SandboxPool(args.workers, quench_limits(language, args.timeout), isolation="bwrap") as pool:
        measure(language, pool, args, root)


def measure(language: str, pool: SandboxPool, args: argparse.Namespace, root: str) -> None:
    cases = samples(language, args.problems)
    check = mxeval_checker(language, root)
    run_quench(pool, cases[-1:])  # untimed: first-use costs (page cache, archives) of each executor
    run_mxeval(check, cases[-1:], 1, args.timeout)
    for repeat in range(args.repeats):
        if repeat % 2 == 0:
            results, ours_s, ours_cpu = run_quench(pool, cases)
            theirs, theirs_s, theirs_cpu = run_mxeval(check, cases, args.workers, args.timeout)
        else:
            theirs, theirs_s, theirs_cpu = run_mxeval(check, cases, args.workers, args.timeout)
            results, ours_s, ours_cpu = run_quench(pool, cases)
        ours = [result.passed for result in results]
        agree = sum(a == b for a, b in zip(ours, theirs)) / len(cases)
        rate_ours, rate_theirs = len(cases) / ours_s, len(cases) / theirs_s
        cpu_ours, cpu_theirs = 1000 * ours_cpu / len(cases), 1000 * theirs_cpu / len(cases)
        print(f"{language:<11} {repeat + 1:>6} {len(cases):>7} {agree:>7.1%} {rate_ours:>9.2f} {rate_theirs:>9.2f} "
              f"{rate_ours / rate_theirs:>5.2f}x {cpu_ours:>8.0f} {cpu_theirs:>8.0f} {cpu_theirs / cpu_ours:>5.2f}x  "
              f"(passed: quench {sum(ours)}, mxeval {sum(theirs)})")
        for (problem, _), result, verdict in zip(cases, results, theirs):
            if result.passed != verdict:
                print(f"    disagree on {problem.task_id}: mxeval passed={verdict}, quench {result.outcome.value}: "
                      f"{result.detail[:160]!r} after {result.seconds:.1f} s")
        sys.stdout.flush()


def main() -> int:
    args = parse_args()
    os.environ["NODE_PATH"] = NODE_PATH  # mxeval's harness requires lodash where node finds it
    certificates = os.environ.get(CA_CERTS_VAR)
    if certificates and not args.inherit_node_ca_certs:
        del os.environ[CA_CERTS_VAR]
    location = mxeval_module_path()
    mode = f"mxeval package ({location})" if location else "mxeval replica (package not importable)"
    print(f"quench SandboxPool (bwrap) vs {mode}; {args.workers} workers, {args.problems} problems per language; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; mxeval's {CA_CERTS_VAR}: "
          f"{certificates if certificates and args.inherit_node_ca_certs else 'unset'}")
    print(f"{'language':<11} {'repeat':>6} {'samples':>7} {'agree':>7} {'quench/s':>9} {'mxeval/s':>9} {'ratio':>6} "
          f"{'quench ms':>8} {'mxeval ms':>8} {'ratio':>6}   (ms: CPU per program)")
    with tempfile.TemporaryDirectory(prefix="mxeval-replica-") as root:
        for language in args.languages.split(","):
            if not has_toolchain(language):
                print(f"{language:<11} skipped: no toolchain here")
                continue
            compare(language, args, root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
