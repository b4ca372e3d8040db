"""MBPP+ execution: EvalPlus's comparison, two verdicts per program, and the references pass their own inputs."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Iterator

import pytest

from quench.datasets import load_benchmark
from quench.datasets.mbppplus import plus_task, raw_records
from quench.execution import Outcome, SandboxLimits, SandboxPool
from quench.execution.plus import (FACTOR, MIN_LIMIT_S, PlusPool, oracle_for, prepare_oracles, sandbox_limits,
                                   time_limits)
from quench.execution.plus_harness import matches
from quench.execution.sanitize import program_for

WRONG_ORDER = "  return tuple(sorted(set(test_tup1) & set(test_tup2)))\n"  # Mbpp/2: MBPP's asserts pass, plus does not


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Oracles of this module's problems in a cache of its own (QUENCH_CACHE)."""
    directory = tmp_path_factory.mktemp("quench-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("QUENCH_CACHE", str(directory))
        yield directory


@pytest.fixture(scope="module")
def plus_pool(cache: Path) -> Iterator[SandboxPool]:
    with SandboxPool(2, SandboxLimits(timeout_s=30.0)) as pool:
        yield pool


def run(pool: SandboxPool, pairs: list[tuple[str, str]]):
    """(task id, completion) -> PlusResult, in order."""
    problems = {p.task_id: p for p in load_benchmark("mbpp+", "all", sorted({t for t, _ in pairs}))}
    results = dict(PlusPool(pool).imap((i, program_for(problems[t], c)) for i, (t, c) in enumerate(pairs)))
    return [results[i] for i in range(len(pairs))]


@pytest.mark.parametrize(("out", "expected", "atol", "verdict"), [
    (0.1 + 0.2, 0.3, 0.0, True),  # floats get atol 1e-6 where the problem gives none
    (0.3001, 0.3, 0.0, False),
    (0.3001, 0.3, 1e-3, True),
    ([1.0, 2.0000001], [1.0, 2.0], 0.0, True),  # a list of floats, elementwise
    ((1.0, 2.0000001), [1.0, 2.0], 0.0, False),  # ... of the expected type only
    ([1.0], [1.0, 2.0], 0.0, False),  # ... and length
    (1, 1.0, 0.0, True),  # equal: exact comparison passes first
    (2, 2.0000001, 0.0, False),  # an int is not a float
    ("0.3", 0.3, 1e-3, False),
    (float("inf"), float("inf"), 1e-4, True),
    (float("nan"), float("nan"), 1e-4, False),  # np.allclose: nan is not close to nan
    ((3, 1.5), (3, 1.5000001), 1e-4, True),  # atol problems: mixed tuples, elementwise
    ([[1.0]], [[1.0000001]], 1e-4, True),
    ([1, 2], [2, 1], 0.0, False),
    ({1, 2}, {2, 1}, 0.0, True),
])
def test_float_comparison(out, expected, atol, verdict) -> None:
    assert matches(out, expected, atol) is verdict


def test_special_oracles() -> None:
    assert matches("anything", False, 0.0, "any")
    assert matches(0, 7, 0.0, "zero_ok") and not matches(3, 7, 0.0, "zero_ok")
    assert matches(object(), True, 0.0, "not_none") and not matches(None, True, 0.0, "not_none")


def test_time_limits_follow_evalplus() -> None:
    assert time_limits([0.0, 0.1, 2.0]) == [MIN_LIMIT_S, MIN_LIMIT_S, FACTOR * 2.0]


def test_oracle_is_cached_by_content(cache: Path) -> None:
    task = plus_task("Mbpp/3")
    oracle = oracle_for(task)
    assert len(oracle.base) == len(task.base_inputs) and len(oracle.plus) == len(task.plus_inputs)
    assert len(list((cache / "mbppplus").glob("Mbpp_3-*.pkl"))) == 1
    assert oracle_for(task) == oracle  # read back from the cache


def test_wrong_program_passes_base_fails_plus(plus_pool: SandboxPool) -> None:
    reference, wrong = run(plus_pool, [("Mbpp/2", plus_task("Mbpp/2").reference.split(":\n", 1)[1]),
                                       ("Mbpp/2", WRONG_ORDER)])
    assert reference.base.passed and reference.plus.passed
    assert wrong.base.passed and not wrong.plus.passed
    assert wrong.plus.detail.startswith("PlusTestFailed: plus input")


def test_failing_base_fails_both(plus_pool: SandboxPool) -> None:
    (result,) = run(plus_pool, [("Mbpp/2", "  return ()\n")])
    assert not result.base.passed and not result.plus.passed
    assert result.base.detail.startswith("BaseTestFailed: base input 1 of 3 wrong")


def test_input_time_limit_and_killed_programs(plus_pool: SandboxPool) -> None:
    """A hang is stopped at the input's limit; a program that kills itself on an extra input gets its
    base verdict from a base-only run."""
    big = "  if len(test_tup1) > 6:\n    {}\n  return tuple(set(test_tup1) & set(test_tup2))\n"
    hang, dies = run(plus_pool, [("Mbpp/2", big.format("while True: pass")),
                                 ("Mbpp/2", big.format("import os; os._exit(3)"))])
    assert hang.base.passed and hang.plus.outcome is Outcome.timeout and "timed out after 1 s" in hang.plus.detail
    assert dies.base.passed and dies.plus.outcome is Outcome.crashed


def test_wrapped_candidate_names_are_its_own(plus_pool: SandboxPool) -> None:
    """The harness runs in its own namespace: a sample's helpers named like the harness's stay the sample's."""
    code = "  return close(test_tup1, test_tup2)\n\ndef close(a, b):\n  return tuple(set(a) & set(b))\n"
    (result,) = run(plus_pool, [("Mbpp/2", code)])
    assert result.plus.passed


def references_pass(task_ids: list[str]) -> None:
    prepare_oracles(task_ids, workers=2)
    problems = load_benchmark("mbpp+", "all", task_ids)
    limits = sandbox_limits(SandboxLimits(timeout_s=30.0), task_ids)
    with SandboxPool(2, limits) as pool:
        results = dict(PlusPool(pool).imap((p.task_id, program_for(p, p.canonical_solution)) for p in problems))
    failing = {t: r.plus.detail for t, r in results.items() if not (r.base.passed and r.plus.passed)}
    assert not failing


def test_sampled_references_pass_their_plus_inputs(cache: Path) -> None:
    references_pass(random.Random(0).sample(sorted(raw_records()), 40))


@pytest.mark.full
def test_every_reference_passes_its_plus_inputs(cache: Path) -> None:
    references_pass(sorted(raw_records()))
