"""ReCode's transformations on MBXP's languages: before/after strings per language, what does not
apply, and the meaning check with the reference run in the real sandbox."""

from __future__ import annotations

import random
import shutil

import pytest

from quench.datasets import Problem, partial_problem
from quench.perturbations import FUNCTION_NAME, create, perturb_problems, validate
from quench.perturbations.languages import LanguageAware, comment_block, inapplicable, rename_everywhere
from quench.perturbations.validate import SandboxRunner

JS = Problem(
    "MBJSP/1",
    "/**\n * Write a function that returns the sum of two numbers.\n *\n * > addNums(1, 2)\n * 3\n */\n"
    "function addNums(a, b) {\n",
    "  const s = a + b;\n  return s;\n}",
    "\nconst x = addNums(1, 2);\nif (x !== 3) { throw 'Error: ' + x; }\n",
    "addNums", "mbjsp", language="javascript")
GO = Problem(
    "MBGP/1",
    'package main\n\nimport (\n\t"fmt"\n)\n// Code should be written in Go/Golang\n'
    "// Write a function that returns the sum of two numbers.\n// Examples:\n// >>> add_nums(1, 2)\n// >>> 3\n"
    "func add_nums (a int, b int) int {\n",
    "",
    '\n\nfunc main() {\n\tfmt.Println(add_nums(1, 2), "failed to pass")\n}\n',
    "add_nums", "mbgp", language="go")
CPP = Problem(
    "MBCPP/1",
    "#include <bits/stdc++.h>\nusing namespace std;\n\n\n/**\n * Write a function that returns the sum of two numbers.\n"
    " * > addNums(1, 2)\n * 3\n */\nint addNums(int a, int b) {\n",
    "    int s = a + b;\n    return s;\n}",
    "\nint main(int argc, char* argv[]) {\n    int x0 = addNums(1, 2);\n    if (!(x0 == 3)) {\n"
    '        throw runtime_error("Exception -- test case 0 did not pass.");\n    }\n    return 0;\n}\n',
    "addNums", "mbcpp", language="cpp")
JAVA = Problem(
    "MBJP/1",
    "import java.util.*;\n\n\nclass AddNums {\n    /**\n     * Write a function that returns the sum of two numbers.\n"
    "     *\n     * > addNums(1, 2)\n     * 3\n     */\n    public static int addNums(int a, int b) {\n",
    "        int s = a + b;\n        return s;\n    }\n}",
    "\n\nclass Main {\n    public static void main(String[] args) throws Exception {\n"
    "        int x0 = AddNums.addNums(1, 2);\n        if (!(x0 == 3)) {\n"
    '            throw new java.lang.Exception("Exception -- test case 0 did not pass.");\n        }\n    }\n}\n',
    "addNums", "mbjp", language="java")
ALL = [JS, GO, CPP, JAVA]


def perturb(name: str, problem: Problem, seed: int = 0) -> Problem:
    return LanguageAware(create(name)).apply(problem, random.Random(seed))


@pytest.mark.parametrize("problem", ALL, ids=lambda p: p.language)
def test_a_docstring_transformation_edits_only_the_comments_prose(problem: Problem) -> None:
    variant = perturb("SynonymSubstitution", problem)
    edits = {problem.prompt.replace("Write a", f"{verb} a", 1).replace("the sum", f"the {noun}", 1)
             for verb in ("Write", "Implement", "Create") for noun in ("sum", "total")}
    assert variant.prompt in edits - {problem.prompt}
    assert (variant.test, variant.canonical_solution) == (problem.test, problem.canonical_solution)


def test_the_comments_examples_and_gos_boilerplate_stay_as_they_are() -> None:
    for problem in ALL:
        block = comment_block(problem.prompt, problem.entry_point)
        prose = [problem.prompt[start:end] for start, end in block.prose]
        assert prose == ["Write a function that returns the sum of two numbers."], problem.language
    assert comment_block("function f(a) {\n", "f") is None  # no comment: nothing to edit


def test_words_in_the_harnesss_strings_are_not_taken_for_names() -> None:
    infinitive = GO.with_changes(prompt=GO.prompt.replace("that returns the sum", "to add"))
    assert perturb("TenseTransformationPast", infinitive) == infinitive  # "to add" stays, as "to" is prose
    assert perturb("EnglishInflectionalVariation", GO).prompt == GO.prompt.replace("that returns", "returning")


def test_character_noise_keeps_every_comment_marker() -> None:
    variant = perturb("ChangeCharCase", JAVA, seed=1)
    assert variant.prompt != JAVA.prompt
    assert [line[:7] for line in variant.prompt.split("\n")] == [line[:7] for line in JAVA.prompt.split("\n")]


@pytest.mark.parametrize(("problem", "new"), [(JS, "add_nums"), (GO, "addNums"), (CPP, "add_nums"), (JAVA, "add_nums")],
                         ids=lambda p: getattr(p, "language", ""))
def test_renaming_updates_the_signature_the_examples_and_every_call_site(problem: Problem, new: str) -> None:
    variant = perturb("FuncRenameCamelCase", problem)
    old = problem.entry_point
    assert variant.entry_point == new
    assert variant.prompt == problem.prompt.replace(old, new)
    assert variant.test == problem.test.replace(old, new)
    assert old not in variant.prompt + variant.test


def test_java_renames_the_method_and_keeps_its_class() -> None:
    variant = perturb("FuncRenameCamelCase", JAVA)
    assert "class AddNums {" in variant.prompt and "AddNums.add_nums(1, 2)" in variant.test


def test_a_name_that_is_taken_or_a_keyword_leaves_the_problem_as_it_is() -> None:
    assert rename_everywhere(JS, "compare") != JS  # free in this program
    assert rename_everywhere(JS, "x") == JS  # the harness's variable
    assert rename_everywhere(JS, "function") == JS
    assert rename_everywhere(GO, "func") == GO
    assert rename_everywhere(JAVA, "AddNums") == JAVA  # the class


def test_tab_indent_converts_the_prompt_and_the_hidden_rest() -> None:
    variant = perturb("tab_indent", JS)
    assert variant.prompt.endswith("function addNums(a, b) {\n\tconst s = a + b;\n")
    assert variant.canonical_solution == "\treturn s;\n}"
    go = perturb("tab_indent", GO)  # Go's tabs become spaces
    assert '\n    "fmt"\n' in go.prompt and go.prompt.replace('    "fmt"', '\t"fmt"') == GO.prompt


@pytest.mark.parametrize(("problem", "seam"), [(JS, " */\nfunction"), (GO, "// >>> 3\nfunc"), (CPP, " */\nint addNums"),
                                             (JAVA, "     */\n    public")], ids=lambda p: getattr(p, "language", ""))
def test_blank_lines_after_the_comment_and_after_the_code(problem: Problem, seam: str) -> None:
    partial = partial_problem(problem)
    after_doc = perturb("new_line_afterdoc", problem)
    assert after_doc.prompt == partial.prompt.replace(seam, seam.replace("\n", "\n\n", 1))
    assert after_doc.canonical_solution == partial.canonical_solution
    assert perturb("new_line_aftercode", problem).prompt == partial.prompt + "\n"


def test_doc2comments_turns_a_block_comment_into_line_comments() -> None:
    variant = perturb("doc2comments", JAVA)
    assert variant.prompt.startswith(
        "import java.util.*;\n\n\nclass AddNums {\n    // Write a function that returns the sum of two numbers.\n"
        "    //\n    // > addNums(1, 2)\n    // 3\n    public static int addNums(int a, int b) {\n")
    assert perturb("doc2comments", GO) == GO  # already line comments: listed as not applicable


def test_new_lines_adds_blank_lines_only_after_code_lines() -> None:
    variant = perturb("new_lines", JS, seed=3)
    assert variant.prompt.replace("\n\n", "\n") == partial_problem(JS).prompt
    assert variant.prompt.count("\n\n") >= 1 and variant.prompt.startswith(JS.prompt.split("function")[0])


def test_transformations_that_do_not_carry_over_are_named_with_the_reason() -> None:
    skipped = inapplicable(["DeadCodeInserter", "VarRenamerRN", "split_lines", "doc2comments", "tab_indent",
                            "ChangeCharCase", "FuncRenameSwapChar"], [GO])
    assert sorted(skipped) == ["DeadCodeInserter", "VarRenamerRN", "doc2comments", "split_lines"]
    assert all(reason.startswith("not applicable to Go: ") for reason in skipped.values())
    assert "doc2comments" not in inapplicable(["doc2comments"], [JS, GO])  # applies to JavaScript
    assert inapplicable(["DeadCodeInserter"], []) == {}


def test_perturb_problems_leaves_out_what_does_not_apply_and_reports_it() -> None:
    made = perturb_problems([GO], ["DeadCodeInserter", "FuncRenameCamelCase", "tab_indent"], seeds=1)
    assert sorted(made.stats) == ["FuncRenameCamelCase", "tab_indent"]
    assert list(made.summary()["not_applicable"]) == ["DeadCodeInserter"]
    assert made.stats["FuncRenameCamelCase"].valid == 1  # Go has no reference: checked as text


def test_go_rename_that_misses_a_call_site_fails_the_text_check() -> None:
    renamed = perturb("FuncRenameCamelCase", GO)
    missed = renamed.with_changes(test=GO.test)
    valid, invalid = validate([(GO, renamed, FUNCTION_NAME), (GO, missed, FUNCTION_NAME)])
    assert valid.valid and not invalid.valid and "renamed" in invalid.reason


@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")
def test_the_reference_is_run_and_a_missed_call_site_is_rejected() -> None:
    renamed = perturb("FuncRenameCamelCase", JS)
    missed = renamed.with_changes(test=JS.test)  # the harness still calls addNums
    formatted = perturb("tab_indent", JS)
    broken = formatted.with_changes(canonical_solution=formatted.canonical_solution.replace("s;", "s + 1;"))
    verdicts = validate([(JS, renamed, FUNCTION_NAME), (JS, missed, FUNCTION_NAME),
                         (JS, formatted, "code_format"), (JS, broken, "code_format")], SandboxRunner(workers=1))
    assert [v.valid for v in verdicts] == [True, False, True, False], verdicts
    assert verdicts[1].reason.startswith("reference ")


def test_none_applying_is_one_error_line_before_any_work(tmp_path) -> None:
    import subprocess
    import sys

    for command in (("perturb", "--benchmark", "mbjsp", "--tasks", "11", "--transforms", "split_lines"),
                    ("robustness", "--benchmark", "mbgp", "--tasks", "11", "--categories", "code_syntax")):
        done = subprocess.run([sys.executable, "-m", "quench.cli.main", *command, "--out", str(tmp_path / "out")],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().splitlines()[-1].startswith("error: --categories/--transforms: none of ")
        assert "loading" not in done.stderr and not (tmp_path / "out").exists()
