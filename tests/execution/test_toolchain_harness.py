"""The C++ test harness compiled once into the build cache: programs link it, and build the same without it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from sandbox_helpers import needs_language

from quench.datasets import Problem
from quench.datasets.harness import CPP_HARNESS_OBJECT
from quench.datasets.languages import launcher, harnessed
from quench.execution import Outcome, SandboxLimits, SandboxPool
from quench.execution.toolchains import prepare, prepare_cpp_harness, toolchain_dir

TEST = ("\ntemplate <typename T> bool compare(T a, T b){ \n    return a == b; \n}\n\n"
        "int main(int argc, char* argv[]) {\n    int x0 = twice(2);\n    if (!(compare(x0, 4))) {\n"
        '        throw runtime_error("Exception -- test case 0 did not pass.");\n    }\n    return 0;\n}\n')
PROBLEM = Problem("MBCPP/twice", "#include <bits/stdc++.h>\nusing namespace std;\nint twice(int x) {\n", "", TEST, "twice",
                  language="cpp")


def test_the_harness_object_is_prepared_and_named_in_the_launcher() -> None:
    if shutil.which("g++") is None:
        pytest.skip("no g++ here")
    built = prepare_cpp_harness()
    assert built == Path(toolchain_dir()) / CPP_HARNESS_OBJECT and built.stat().st_size > 0
    text = launcher("cpp", harnessed("cpp", PROBLEM.prompt, "", TEST))
    assert repr(CPP_HARNESS_OBJECT) in text and "SOURCE_FILES = ['harness.cpp', 'main.cpp']" in text


def test_verdicts_with_the_harness_object_are_those_without_it() -> None:
    needs_language("cpp")
    prepare("cpp")
    samples = ["    return 2 * x;\n}\n", "    return x;\n}\n", "    exit(0);\n}\n", "    return x\n}\n"]
    expected = [Outcome.passed, Outcome.failed, Outcome.crashed, Outcome.compile_error]
    programs = [PROBLEM.program(sample) for sample in samples]
    plain = [program.replace(repr(CPP_HARNESS_OBJECT), repr("cpp/no-such-harness.o")) for program in programs]
    with SandboxPool(2, SandboxLimits(timeout_s=30.0, timeout_retries=0), isolation="bwrap") as pool:
        results = pool.run_many(programs + plain)
    assert [r.outcome for r in results] == expected * 2, [r.detail for r in results]
