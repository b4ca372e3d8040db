"""MBPP+ as `--benchmark mbpp+`: its problems, prompts in MBPP's format, and inputs with their types restored."""

from __future__ import annotations

import ast

import pytest

from quench.cli.main import main
from quench.datasets import BENCHMARKS, load_benchmark
from quench.datasets.mbppplus import plus_task, restore_inputs
from quench.errors import QuenchError


def test_counts_and_splits() -> None:
    assert "mbpp+" in BENCHMARKS
    everything = load_benchmark("mbpp+", "all")
    assert len(everything) == 399 and everything[0].task_id == "Mbpp/2"
    assert len(load_benchmark("mbpp+", "test")) == 239  # MBPP's test split, tasks 11-510
    assert sum(len(plus_task(p.task_id).plus_inputs) for p in everything) == 42082
    assert sum(len(plus_task(p.task_id).base_inputs) for p in everything) == 1236


def test_prompt_is_signature_docstring_and_examples() -> None:
    (problem,) = load_benchmark("mbpp+", "all", ["Mbpp/2"])
    assert problem.prompt == (
        "\n\ndef similar_elements(test_tup1, test_tup2):\n"
        '  """\n'
        "  Write a function to find the shared elements from the given two lists.\n"
        "  >>> similar_elements((3, 4, 5, 6), (5, 7, 4, 10))\n  (4, 5)\n"
        "  >>> similar_elements((1, 2, 3, 4), (5, 4, 3, 7))\n  (3, 4)\n"
        "  >>> similar_elements((11, 12, 14, 13), (17, 15, 14, 13))\n  (13, 14)\n"
        '  """\n')
    assert problem.canonical_solution == "  return tuple(set(test_tup1) & set(test_tup2))\n"
    assert problem.benchmark == "mbpp+"


def test_helpers_follow_the_body_and_imports_lead() -> None:
    (helper, imports) = load_benchmark("mbpp+", "all", ["Mbpp/6", "Mbpp/4"])
    assert "is_Power_Of_Two" not in helper.prompt and "def is_Power_Of_Two" in helper.canonical_solution
    assert imports.prompt.startswith("import heapq as hq\n")


def test_every_prompt_is_a_docstring_function() -> None:
    """prompt + reference parses, and the entry point's first statement is the docstring, in every problem."""
    for problem in load_benchmark("mbpp+", "all"):
        tree = ast.parse(problem.prompt + problem.canonical_solution)
        function = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == problem.entry_point)
        assert ast.get_docstring(function), problem.task_id


@pytest.mark.parametrize(("task_id", "raw", "restored"), [
    ("Mbpp/2", [[[1, 2], [3]]], [[(1, 2), (3,)]]),
    ("Mbpp/124", [[1.0, "1j"]], [[1.0, 1j]]),
    ("Mbpp/252", [["1+2j"]], [[1 + 2j]]),
    ("Mbpp/580", [[[1, [2, 3]], 4]], [[(1, (2, 3)), 4]]),
    ("Mbpp/3", [[5]], [[5]]),
])
def test_restore_inputs(task_id, raw, restored) -> None:
    assert restore_inputs(task_id, raw) == restored
    assert [type(a) for a in restore_inputs(task_id, raw)[0]] == [type(a) for a in restored[0]]


def test_unknown_benchmark_lists_the_names(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(QuenchError, match="mbpp, mbpp\\+"):
        load_benchmark("nosuch")
    assert main(["run", "--benchmark", "nosuch", "--limit", "1"]) == 2
    assert "error: --benchmark nosuch: unknown benchmark; choose humaneval, mbpp, mbpp+" in capsys.readouterr().err
