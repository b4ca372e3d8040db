"""MBPP+ (EvalPlus): 399 MBPP problems with MBPP's own test inputs and ~105 extra inputs each.

A problem's tests are inputs, not asserts: the expected output of each input is what the
reference solution returns for it (quench.execution.plus computes and caches them). Inputs are
stored as JSON, which has no tuples, sets or complex numbers; `restore_inputs` turns them back
into the types the reference expects, by EvalPlus's per-task table.

Prompts are built in the format of quench's MBPP prompts (ReCode's): the reference's imports and
signature, then a docstring with EvalPlus's task description and MBPP's three asserts as `>>>`
examples. The reference body is the canonical continuation; helper functions that the reference
defines before its entry point follow the body, so the prompt never contains them.
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import importlib.resources
import json
import warnings
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Callable

from quench.datasets.problem import PLUS_BENCHMARK, Problem

BENCHMARK = PLUS_BENCHMARK
DATA_FILE = "MbppPlus-evalplus-038088e.jsonl.gz"


@dataclass(frozen=True)
class PlusTask:
    """One MBPP+ problem's tests: the reference and its inputs (types restored)."""

    task_id: str  # "Mbpp/2"
    entry_point: str
    reference: str  # the reference program (imports, helpers, the entry point)
    base_inputs: tuple  # MBPP's own test inputs: each a list of arguments
    plus_inputs: tuple  # EvalPlus's extra inputs
    atol: float  # absolute tolerance for float outputs (0: exact, but floats get 1e-6)
    digest: str  # content hash of the raw record: keys cached expected outputs


def mbppplus_path() -> Path:
    return Path(str(importlib.resources.files("quench.datasets") / "data" / DATA_FILE))


@cache
def raw_records() -> dict[str, dict]:
    with gzip.open(mbppplus_path(), "rt", encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines if line.strip()]
    return {row["task_id"]: row for row in rows}


@cache
def plus_task(task_id: str) -> PlusTask:
    """The tests of one MBPP+ problem (KeyError for an unknown id)."""
    row = raw_records()[task_id]
    plus = row["plus_input"] or []  # Mbpp/793 stores {} for "no extra inputs"
    digest = hashlib.sha256(json.dumps(
        [row["canonical_solution"], row["entry_point"], row["base_input"], plus, row["atol"]]).encode()).hexdigest()
    return PlusTask(
        task_id=task_id,
        entry_point=row["entry_point"],
        reference=row["canonical_solution"],
        base_inputs=tuple(restore_inputs(task_id, row["base_input"])),
        plus_inputs=tuple(restore_inputs(task_id, plus)),
        atol=float(row["atol"]),
        digest=digest[:24],
    )


def load_mbppplus() -> list[Problem]:
    """Every MBPP+ problem, in the order of the release (Mbpp/2 ... Mbpp/809)."""
    return [problem_from_record(row) for row in raw_records().values()]


def problem_from_record(row: dict) -> Problem:
    prompt, body = split_reference(row["canonical_solution"], row["entry_point"], description(row["prompt"]),
                                   row["assertion"])
    return Problem(
        task_id=row["task_id"],
        prompt=prompt,
        canonical_solution=body,
        test=base_asserts_check(row["assertion"], row["entry_point"]),
        entry_point=row["entry_point"],
        benchmark=BENCHMARK,
    )


def description(prompt: str) -> str:
    """EvalPlus's prompt is the task description between `'''` lines."""
    return prompt.strip().strip("'\"").strip()


def split_reference(reference: str, entry_point: str, text: str, assertion: str) -> tuple[str, str]:
    """(imports + signature + docstring, body + helpers) of the reference program."""
    with warnings.catch_warnings():  # some references have invalid escapes in regex strings (Mbpp/7, 16, ...)
        warnings.simplefilter("ignore")
        tree = ast.parse(reference)
    lines = reference.splitlines(keepends=True)
    index = next(i for i, node in enumerate(tree.body) if isinstance(node, ast.FunctionDef) and node.name == entry_point)
    function = tree.body[index]
    assert isinstance(function, ast.FunctionDef)
    imports = [node for node in tree.body[:index] if isinstance(node, (ast.Import, ast.ImportFrom))]
    helpers = [node for node in tree.body if node is not function and node not in imports]
    body = function.body[1:] if _is_docstring(function.body[0]) and len(function.body) > 1 else function.body
    header = "".join(lines[function.lineno - 1:body[0].lineno - 1])  # MBPP+ has no one-line or decorated entry points
    first = lines[body[0].lineno - 1]
    indent = first[:len(first) - len(first.lstrip())]  # tabs or spaces, as the body has them
    head = "".join(_segment(lines, node) for node in imports)
    prompt = f"{head}\n\n{header}{docstring(text, assertion, entry_point, indent)}"
    rest = "".join(lines[body[0].lineno - 1:function.end_lineno])
    helpers_text = "".join("\n\n" + _segment(lines, node) for node in helpers)
    return prompt, rest + helpers_text


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def _segment(lines: list[str], node: ast.stmt) -> str:
    start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))]) - 1
    return "".join(lines[start:node.end_lineno])


def docstring(text: str, assertion: str, entry_point: str, indent: str) -> str:
    """The description, then each MBPP assert as a `>>>` example (its call and result where it has one)."""
    out = [f'{indent}"""\n'] + [f"{indent}{line}".rstrip() + "\n" for line in text.splitlines()]
    for statement in ast.parse(assertion).body:
        if not isinstance(statement, ast.Assert):
            continue
        call, result = example(statement.test, entry_point)
        out.append(f"{indent}>>> {call}\n{indent}{result}\n")
    out.append(f'{indent}"""\n')
    return "".join(out).replace("\\", "\\\\")


def example(test: ast.expr, entry_point: str) -> tuple[str, str]:
    """`f(x) == y` -> ("f(x)", "y"); any other check -> (the check, "True")."""
    if (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)
            and isinstance(test.left, ast.Call) and isinstance(test.left.func, ast.Name)
            and test.left.func.id == entry_point):
        return ast.unparse(test.left), ast.unparse(test.comparators[0])
    return ast.unparse(test), "True"


def base_asserts_check(assertion: str, entry_point: str) -> str:
    """MBPP's asserts as a `check(candidate)` (for reading: MBPP+ runs inputs, see execution/plus.py)."""
    body = "".join(f"    {line}\n" for line in assertion.strip().splitlines())
    return f"\n\ndef check(candidate):\n    import math\n    {entry_point} = candidate\n{body}\n"


# EvalPlus's table of which arguments JSON turned from tuples (sets, complex numbers) into lists
# or strings, by task number (evalplus/data/mbpp.py, `mbpp_deserialize_inputs`).
TUPLE_ARGS = {2, 116, 132, 143, 222, 261, 273, 394, 399, 421, 424, 429, 470, 560, 579, 596, 616, 630, 726, 740,
              744, 809}  # every argument is a tuple
TUPLE_LIST_ARGS = {63, 64, 70, 94, 120, 237, 272, 299, 400, 409, 417, 438, 473, 614, 780}  # lists of tuples
FIRST_TUPLE_LIST = {75, 413, 444, 753}  # the first argument is a list of tuples
SECOND_TUPLE = {106, 750}
FIRST_TUPLE = {250, 405, 446, 617, 720, 763, 808}
TUPLES_OF_TUPLES = {259, 401, 445}
DEEP_TUPLES = {580, 615, 791}  # every list at any depth is a tuple


def _tuple_deep(value: Any) -> Any:
    return tuple(_tuple_deep(item) for item in value) if isinstance(value, list) else value


def _restorer(number: int) -> Callable[[list], Any] | None:
    if number in TUPLE_ARGS:
        return lambda args: [tuple(a) for a in args]
    if number in TUPLE_LIST_ARGS:
        return lambda args: [[tuple(item) for item in a] for a in args]
    if number in FIRST_TUPLE_LIST:
        return lambda args: [[tuple(item) for item in args[0]], args[1]]
    if number in SECOND_TUPLE:
        return lambda args: [args[0], tuple(args[1])]
    if number in FIRST_TUPLE:
        return lambda args: [tuple(args[0]), args[1]]
    if number in TUPLES_OF_TUPLES:
        return lambda args: [tuple(tuple(item) for item in a) for a in args]
    if number in DEEP_TUPLES:
        return _tuple_deep
    if number == 115:  # a list of sets; EvalPlus gives an empty member as {} (a dict), kept as it is
        return lambda args: [[set(item) if isinstance(item, list) and item else {} for item in args[0]]]
    if number == 124:
        return lambda args: (float(args[0]), complex(args[1]))
    if number == 252:
        return lambda args: [complex(args[0])]
    if number == 278:
        return lambda args: [tuple(tuple(item) if isinstance(item, list) else item for item in args[0])]
    if number == 307:
        return lambda args: [tuple(args[0]), args[1], args[2]]
    if number == 722:
        return lambda args: [{key: tuple(value) for key, value in args[0].items()}, *args[1:]]
    return None


def restore_inputs(task_id: str, inputs: list) -> list:
    """Inputs with the types the reference takes (tuples, sets, complex numbers) restored."""
    restore = _restorer(int(task_id.split("/")[1]))
    return [list(restore(args)) if restore else args for args in inputs]
