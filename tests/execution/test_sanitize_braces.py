"""Sanitizing MBXP answers: before/after strings per language, chat and raw completions."""

from __future__ import annotations

from quench.datasets import Problem
from quench.execution.program_build import program_for
from quench.execution.sanitize import sanitize
from quench.execution.sanitize_braces import code_braces, cut_after_close, definition_start

JS = Problem("MBJSP/1", "/**\n * Add one.\n * > addOne(1)\n * 2\n */\nfunction addOne(x) {\n", "    return x + 1;\n}",
             "\nconsole.assert(addOne(1) === 2);\n", "addOne", language="javascript")
JAVA = Problem("MBJP/1", "import java.util.*;\n\n\nclass AddOne {\n    /**\n     * > addOne(1)\n     * 2\n     */\n"
               "    public static int addOne(int x) {\n", "        return x + 1;\n    }\n}\n",
               "\nclass Main {\n    public static void main(String[] a) { }\n}\n", "addOne", language="java")
GO = Problem("MBGP/1", 'package main\n\nimport (\n\t"fmt"\n)\n// >>> add_one(1)\nfunc add_one (x int) int {\n', "",
             "\nfunc main() { fmt.Println(add_one(1)) }\n", "add_one", language="go")


def test_braces_in_strings_comments_and_characters_do_not_count() -> None:
    text = "a = \"}\" + '{' + `}`; // }\n/* { */ {x}"
    assert [step for _, step in code_braces(text)] == [1, -1]


def test_raw_completion_is_cut_where_the_function_closes() -> None:
    text = "    return x + 1;\n}\n\nconsole.log(addOne(3));\nfunction more() {}\n"
    assert sanitize(JS, text, "completion").completion == "    return x + 1;\n}\n"


def test_raw_java_completion_closes_the_method_and_the_class() -> None:
    text = "        return x + 1;\n    }\n\n    public static void main(String[] a) { }\n}\n"
    assert sanitize(JAVA, text, "completion").completion == "        return x + 1;\n    }\n\n    public static void main(String[] a) { }\n}\n"
    assert sanitize(JAVA, "        if (x > 0) { return x + 1; }\n        return 1;\n    }\n}\n// tail\n", "completion").completion \
        == "        if (x > 0) { return x + 1; }\n        return 1;\n    }\n}\n"


def test_unfinished_raw_completion_is_kept_as_written() -> None:
    assert sanitize(JS, "    if (x) {\n        return 1;", "completion").completion == "    if (x) {\n        return 1;\n"


def test_chat_answer_keeps_helpers_and_the_function_and_drops_the_demo() -> None:
    answer = ("Here you go:\n```js\nfunction helper(y) { return y + 1; }\nfunction addOne(x) {\n    return helper(x);\n}\n"
              "console.log(addOne(2));\n```\nIt adds one.")
    clean = sanitize(JS, answer, "chat")
    assert clean.completion == "function helper(y) { return y + 1; }\nfunction addOne(x) {\n    return helper(x);\n}\n"
    assert clean.solution == JS.prompt[: JS.prompt.index("function addOne")] + clean.completion
    assert program_for(JS, clean.completion, clean.solution) == JS.with_changes(prompt=clean.solution).program("")


def test_chat_answer_in_java_goes_back_into_the_prompts_class() -> None:
    answer = ("```java\nimport java.util.*;\n\nclass Solution {\n    public static int addOne(int x) {\n        return x + 1;\n"
              "    }\n\n    public static void main(String[] args) { }\n}\n```")
    clean = sanitize(JAVA, answer, "chat")
    assert clean.solution.endswith("     */\n    public static int addOne(int x) {\n        return x + 1;\n    }\n}\n")
    assert clean.solution.startswith("import java.util.*;\n\n\nclass AddOne {\n")


def test_chat_answer_in_go_keeps_new_imports_and_drops_the_package_and_known_imports() -> None:
    answer = ('```go\npackage main\n\nimport "strings"\nimport "fmt"\n\nfunc add_one(x int) int {\n\treturn x + 1\n}\n\n'
              "func main() {}\n```")
    clean = sanitize(GO, answer, "chat")
    assert clean.completion == 'import "strings"\n\nfunc add_one(x int) int {\n\treturn x + 1\n}\n'
    answer = '```go\npackage main\n\nimport (\n\t"fmt"\n\ts "sort"\n)\n\nfunc add_one(x int) int {\n\treturn x + 1\n}\n```'
    assert sanitize(GO, answer, "chat").completion == 'import s "sort"\n\nfunc add_one(x int) int {\n\treturn x + 1\n}\n'


def test_chat_answer_with_only_a_body_continues_the_prompt() -> None:
    assert sanitize(JS, "```javascript\n    return x + 1;\n}\n```", "chat") == sanitize(JS, "    return x + 1;\n}\n", "completion")


def test_a_doc_example_or_a_call_is_not_the_definition() -> None:
    assert definition_start(JS.prompt, "addOne") == JS.prompt.index("function addOne")
    assert definition_start("    return addOne(x) + 1;\n}\n", "addOne") is None
    assert cut_after_close("x }\n}", 2) == "x }\n}"
