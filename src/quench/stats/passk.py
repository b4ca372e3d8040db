"""The unbiased pass@k estimator (Chen et al., 2021, "Evaluating Large Language Models Trained on Code")."""

from __future__ import annotations

from typing import Iterable, Sequence


def pass_at_k(n: int, c: int, k: int) -> float:
    """pass@k = 1 - C(n-c, k) / C(n, k) for n samples of which c are correct.

    Computed as 1 - prod_{i=n-c+1..n} (1 - k/i), which is exact and avoids huge binomials.
    """
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:
        return 1.0  # every draw of k samples contains a correct one
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1.0 - k / i
    return 1.0 - product


def mean_pass_at_k(counts: Sequence[tuple[int, int]], ks: Iterable[int]) -> dict[int, float]:
    """Mean pass@k over problems given `(n, c)` per problem; a k is reported only if every n >= k."""
    if not counts:
        return {}
    smallest_n = min(n for n, _ in counts)
    return {
        k: sum(pass_at_k_per_problem(counts, k)) / len(counts)
        for k in sorted(set(ks))
        if 1 <= k <= smallest_n
    }


def pass_at_k_per_problem(counts: Sequence[tuple[int, int]], k: int) -> list[float]:
    """pass@k of each problem given `(n, c)` per problem, in order: the values a mean or a bootstrap averages."""
    return [pass_at_k(n, c, k) for n, c in counts]
