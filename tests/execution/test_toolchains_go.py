"""Go's build in the sandbox: the tuned environment reaches the compiler and linker only, the
build follows `go run`'s rules, and every MBGP solution the mxeval comparison runs passes.

Runs in "bwrap" mode; skipped where the machine has no Go.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Iterator

import pytest
from sandbox_helpers import skip_reason

from quench.datasets import Problem, load_benchmark
from quench.datasets.languages import GO_BUILD_ENV, toolchain
from quench.execution import Outcome, SandboxLimits, SandboxPool
from quench.execution.toolchains import has_toolchain

COMPARISON = Path(__file__).resolve().parents[2] / "benchmarks" / "mxeval_compare.py"


@pytest.fixture(scope="module")
def pool() -> Iterator[SandboxPool]:
    reason = skip_reason("bwrap")
    if reason is not None:
        pytest.skip(reason)
    if not has_toolchain("go"):
        pytest.skip("no go toolchain here")
    with SandboxPool(2, SandboxLimits(timeout_s=12.0), isolation="bwrap") as sandbox:
        yield sandbox


def whole(text: str) -> str:
    return Problem("go", "", text, "", "main", language="go").reference_program()


def comparison() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mxeval_compare", COMPARISON)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_collector_settings_are_for_the_build_alone() -> None:
    steps = toolchain("go")
    assert steps.build_env["GOGC"] == "off" and "GOMEMLIMIT" in steps.build_env
    assert "GOGC" not in steps.env and "GOMEMLIMIT" not in steps.env
    assert GO_BUILD_ENV is steps.build_env


def test_the_program_runs_with_gos_defaults(pool: SandboxPool) -> None:
    check = ('package main\nimport "os"\nfunc main() {\n'
             '\tif os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" || os.Getenv("GOCACHE") != "" {\n'
             "\t\tos.Exit(1)\n\t}\n}\n")
    [result] = pool.run_many([whole(check)])
    assert result.outcome is Outcome.passed, result.detail


def test_a_function_without_a_body_is_a_compile_error_as_under_go_run(pool: SandboxPool) -> None:
    [result] = pool.run_many([whole("package main\nfunc helper() int\nfunc main() {\n\t_ = helper()\n}\n")])
    assert result.outcome is Outcome.compile_error, result.detail
    assert "missing function body" in result.detail


@pytest.mark.slow
def test_every_go_solution_of_the_comparison_passes_and_no_wrong_answer_does(pool: SandboxPool) -> None:
    module = comparison()
    solutions = module.go_solutions()
    assert len(solutions) >= 10
    problems = {problem.task_id: problem for problem in load_benchmark("mbgp")}
    cases = [(problems[task_id], completion) for task_id, completion in solutions.items()]
    cases += [(problems[task_id], module.WRONG["go"]) for task_id in solutions]
    results = pool.run_many([problem.program(completion) for problem, completion in cases])
    verdicts = [result.passed for result in results]
    expected = [True] * len(solutions) + [False] * len(solutions)  # a wrong answer may not even build (unused import)
    assert verdicts == expected, [(problem.task_id, result.outcome, result.detail)
                                  for (problem, _), result, due in zip(cases, results, expected) if result.passed is not due]
