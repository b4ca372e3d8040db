"""perturb_problems: seeded determinism, different seeds differ, stats, rejected variants left out."""

from __future__ import annotations

import pytest

from quench.datasets import Problem, load_humaneval
from quench.perturbations import apply_seeded, create, names, perturb_problems, perturbation_class

RANDOMIZED = [n for n in names(include_model_based=False) if perturbation_class(n).randomized]


@pytest.fixture(scope="module")
def humaneval() -> list[Problem]:
    return load_humaneval()[:20]


@pytest.mark.parametrize("name", names(include_model_based=False))
def test_same_seed_same_bytes(humaneval: list[Problem], name: str) -> None:
    first = [apply_seeded(create(name), p, 7).to_json() for p in humaneval]
    again = [apply_seeded(create(name), p, 7).to_json() for p in humaneval]
    assert first == again


TWO_LOOPS = Problem(
    "T/2", 'def pairs(xs, n):\n    """Count the pairs of items that sum to n."""\n    count = 0\n    for a in xs:\n'
    "        for b in xs:\n            if a + b == n and a < b:\n                count += 1\n",
    "    return count\n", "", "pairs", prompt_kind="partial",
)


@pytest.mark.parametrize("name", RANDOMIZED)
def test_seeds_give_different_variants(humaneval: list[Problem], name: str) -> None:
    """Over s0..s9 some problem gets distinct variants (where the prompt allows more than one)."""
    best = 0
    for problem in [*humaneval, TWO_LOOPS]:
        variants = {(v.prompt, v.entry_point) for v in (apply_seeded(create(name), problem, s) for s in range(10))}
        best = max(best, len(variants))
    assert best >= 2


def test_stats_and_kept_variants(problem: Problem, runner) -> None:
    broken = problem.with_changes(task_id="Test/1", test="def check(candidate):\n    assert candidate('x', 0) == 5\n")
    result = perturb_problems([problem, broken], ["VarRenamerNaive", "ChangeCharCase", "OperandSwap"], seeds=2,
                              pool=runner)
    naive = result.stats["VarRenamerNaive"]
    assert (naive.variants, naive.changed, naive.valid) == (4, 4, 2)
    assert [p.task_id for p in result.variants[("VarRenamerNaive", 1)]] == ["Test/0"]
    assert {r.reason for r in result.rejected} == {"the nominal reference fails"}
    assert result.stats["ChangeCharCase"].share_valid == 1.0  # static check: the test is not run
    swap = result.stats["OperandSwap"]
    assert (swap.changed, swap.valid) == (0, 4)  # nothing visible to swap: unchanged and valid
    kept = result.variants[("ChangeCharCase", 0)][0]
    assert kept.meta("perturbation") == "ChangeCharCase" and kept.meta("category") == "docstring"
    assert kept.meta("seed") == "0" and kept.meta("changed") == "true" and kept.task_id == "Test/0"
    assert set(result.summary()["transformations"]) == {"VarRenamerNaive", "ChangeCharCase", "OperandSwap"}


def test_seed_list_and_no_validation(problem: Problem) -> None:
    result = perturb_problems([problem], ["new_lines"], seeds=[3, 11], validate_variants=False)
    assert set(result.variants) == {("new_lines", 3), ("new_lines", 11)} and not result.validated
