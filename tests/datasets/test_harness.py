"""Each MBXP language's test program: where the harness takes the token and reports, what the test becomes."""

from __future__ import annotations

import pytest

from quench.datasets.harness import SALT, cpp_program, go_program, java_test, javascript_program
from quench.datasets.languages import harnessed, launcher

CPP_TEST = ("\ntemplate <typename T> bool compare(T a, T b){ \n    return a == b; \n}\n\n"
            "int main(int argc, char* argv[]) {\n    int x0 = f(1);\n    if (!(compare(x0, 2))) {\n"
            '        throw runtime_error("Exception -- test case 0 did not pass.");\n    }\n    return 0;\n}\n')


def test_cpp_test_is_renamed_compared_with_equal_to_and_out_of_the_completions_macros() -> None:
    built = cpp_program("#include <bits/stdc++.h>\nint f(int x) {\n", "    return x;\n}\n#define throw return 0;\n",
                        CPP_TEST)
    (main_name, main), (harness_name, harness) = built.files
    assert (main_name, harness_name) == ("main.cpp", "harness.cpp")
    assert main.startswith("#include <bits/stdc++.h>\nint f(")  # the precompiled header still applies
    after = main.split("#define throw return 0;\n", 1)[1]
    for name in ("throw", "if", "quench_tests", "runtime_error", "return", "int", "std", "equal_to"):
        assert f"#undef {name}\n" in after
    assert "#undef not\n" not in after  # an operator's name is never a macro
    assert "#undef NDEBUG\n#undef assert\n#include <cassert>\n" in after
    assert "int quench_tests(int argc" in after and "int main(" not in after
    assert f"bool quench_compare_{SALT}(T a, T b)" in after and "std::equal_to<>()(a, b)" in after
    assert "section(\".preinit_array\")" in harness and "quench_tests(argc, argv)" in harness
    assert built.remove_after_build == ("main.cpp", "harness.cpp")


def test_go_harness_is_compiled_first_and_calls_the_tests() -> None:
    built = go_program("package main\n\nfunc f(x int) int {\n", "\treturn x\n}\n", "\nfunc main() {\n\tf(1)\n}\n")
    (_, main), (_, harness) = built.files
    assert f"func quenchTests_{SALT}() {{" in main and "func main()" not in main
    assert f"\tquenchTests_{SALT}()\n" in harness and "os.NewFile(3" in harness
    text = launcher("go", built)
    assert "SOURCE_FILES = ['harness.go', 'main.go']" in text  # its package variable is initialised first


def test_java_main_reads_the_token_before_the_tests_and_asks_the_expected_values_equals() -> None:
    test = ("\n\nclass Main {\n    public static boolean compare(Object obj1, Object obj2) {\n"
            "            return obj1.equals(obj2);\n    }\n    public static void main(String[] args) throws Exception {\n"
            "        int x0 = 1;\n    }\n}\n")
    built = java_test(test)
    assert built.index("public static void main(String[] args)") < built.index("private static void quenchTests(")
    assert '"/proc/self/fd/3"' in built and "return obj2.equals(obj1);" in built


def test_javascript_test_runs_strict_in_a_function_of_its_own_with_frozen_lodash() -> None:
    built = javascript_program("function f(x) {\n", "  return x;\n}\n",
                               '\nconst _ = require("lodash")\n\nfunction compare(a, b){\n    return _.isEqual(a, b)\n}\n')
    (_, main), (runner_name, runner) = built.files
    assert main.startswith('const quenchLodash = Object.freeze(require("lodash"));\n')
    assert "(function () {\n'use strict';\n" in main and "const _ = quenchLodash;" in main
    assert built.script == runner_name == "runner.js" and "vm.runInThisContext" in runner


@pytest.mark.parametrize("language", ["cpp", "go", "java"])
def test_a_test_without_a_main_to_call_is_refused(language: str) -> None:
    with pytest.raises(ValueError, match="for the harness to call"):
        harnessed(language, "", "", "int f() { return 1; }\n")
