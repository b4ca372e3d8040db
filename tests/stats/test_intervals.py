"""Bootstrap intervals: literal cases, coverage on simulated runs with known rates, and the pairing of results."""

import numpy as np
import pytest

from quench.stats.intervals import (
    TOO_FEW_NOMINAL,
    BootstrapConfig,
    Interval,
    drop_interval,
    drop_ratio,
    mean_intervals,
    paired_difference,
    resample_counts,
    wilson_interval,
)
from quench.robustness.metrics import GroupMetrics, RobustnessMetrics, RobustnessRun, VariantOutcomes, robustness_metrics

# Known rates of the simulation: nominal pass 0.5; a nominally passing problem keeps passing under the
# variant with 0.7, a failing one starts passing with 0.1. So Pass = 0.5, RP = 0.35 + 0.05 = 0.4,
# RD = (0.5 − 0.4) / 0.5 = 0.2, RR = 0.15 + 0.05 = 0.2.
TRUE = {"pass_at_k": 0.5, "robust_pass": 0.4, "robust_drop": 0.2, "robust_relative": 0.2}


def simulated_run(rng: np.random.Generator, problems: int) -> RobustnessRun:
    nominal = rng.random(problems) < 0.5
    perturbed = np.where(nominal, rng.random(problems) < 0.7, rng.random(problems) < 0.1)
    ids = [f"P{i}" for i in range(problems)]
    return RobustnessRun(
        nominal_full={t: (bool(x),) for t, x in zip(ids, nominal)},
        variants=(VariantOutcomes("ButterFingersPerturbation", "docstring", 0,
                                  {t: (bool(y),) for t, y in zip(ids, perturbed)}),),
    )


def test_intervals_cover_the_true_rates_about_95_percent_of_the_time():
    rng = np.random.default_rng(2024)
    runs = 300
    covered = {name: 0 for name in TRUE}
    for _ in range(runs):
        metrics = robustness_metrics(simulated_run(rng, 120), ks=(1,), bootstrap=BootstrapConfig(resamples=1000))
        (group,) = metrics.transformations
        for name, truth in TRUE.items():
            interval = group.interval(name, 1)
            covered[name] += interval.low <= truth <= interval.high
    coverage = {name: count / runs for name, count in covered.items()}
    # 300 runs: a true 95% coverage lands in [0.92, 0.975] with probability about 0.97.
    assert all(0.90 <= c <= 0.985 for c in coverage.values()), coverage


def test_a_drop_interval_keeps_each_problems_nominal_and_perturbed_results_together():
    # 200 problems, 100 pass nominally; the variant turns exactly 5 of those into failures and nothing
    # else. Paired, every resample has RP ≤ Pass, so RD ≥ 0 and stays near 5%. Resampled apart, Pass
    # and RP would each move by ±7 points and RD would swing to negative values.
    nominal = np.array([1.0] * 100 + [0.0] * 100)
    robust = nominal.copy()
    robust[:5] = 0.0
    interval = drop_interval(nominal, robust, nominal_passing=100, config=BootstrapConfig())
    assert interval.point == pytest.approx(0.05)
    assert 0.0 < interval.low < 0.05 < interval.high < 0.11


def test_identical_results_bound_the_drop_and_difference_by_the_problems_they_rest_on():
    # No problem changed: every resample gives 0, but 0 changes in 30 nominal passes (50 problems for
    # the difference) bounds the drop by Clopper-Pearson's 0-of-N upper bound, not by a certain 0.
    nominal = np.array([1.0] * 30 + [0.0] * 20)
    interval = drop_interval(nominal, nominal, nominal_passing=30, config=BootstrapConfig())
    bound = 1 - 0.025 ** (1 / 30)
    assert (interval.point, interval.low, interval.high, interval.method) == (0.0, -bound, bound, "exact")
    difference = paired_difference(nominal, nominal, BootstrapConfig())
    bound = 1 - 0.025 ** (1 / 50)
    assert (difference.point, difference.low, difference.high) == (0.0, -bound, bound)


def test_drop_with_too_few_nominal_passes_has_no_interval():
    nominal = np.array([1.0] * 9 + [0.0] * 91)
    interval = drop_interval(nominal, np.zeros(100), nominal_passing=9, config=BootstrapConfig())
    assert interval.note == TOO_FEW_NOMINAL and not interval.reported
    assert (interval.point, interval.low, interval.high, interval.problems) == (1.0, None, None, 100)


def test_drop_ratio_edge_cases():
    ratios = drop_ratio(np.array([0.5, 0.0, 0.0, 0.5]), np.array([0.25, 0.0, 0.5, 0.75]))
    assert ratios[0] == 0.5 and ratios[1] == 0.0 and np.isnan(ratios[2]) and ratios[3] == -0.5


def test_resamples_are_seeded_and_draw_every_problem_count_once_per_resample():
    a = resample_counts(7, 50, 3)
    assert a.shape == (50, 7) and (a.sum(axis=1) == 7).all()
    assert (a == resample_counts(7, 50, 3)).all()
    assert not (a == np.random.default_rng(4).multinomial(7, [1 / 7] * 7, size=50)).all()


def test_all_pass_or_all_fail_takes_the_exact_bound_not_a_zero_width_interval():
    (every,) = mean_intervals(np.ones((12, 1)), BootstrapConfig(resamples=100))
    assert (every.point, every.low, every.high, every.problems) == (1.0, pytest.approx(0.7354, abs=1e-4), 1.0, 12)
    (none,) = mean_intervals(np.zeros((4, 1)), BootstrapConfig())
    # Clopper-Pearson for 0 of 4: [0, 1 − 0.025^(1/4)] = [0, 0.602]
    assert (none.point, none.low, none.high, none.method) == (0.0, 0.0, pytest.approx(0.6024, abs=1e-4), "exact")
    (mixed,) = mean_intervals(np.array([[1.0], [0.0], [0.0], [0.0]]), BootstrapConfig())
    assert mixed.method == "bootstrap" and mixed.low == 0.0 and mixed.high == 0.75


def test_sampled_robust_relative_stays_a_proportion():
    # n = 10 samples, k = 5, independent coin flips: most problems have samples that changed in both
    # directions, so RR⁻@5 + RR⁺@5 is far above 1; RR@5 is pass@5 of the changed samples, at most 1.
    rng = np.random.default_rng(7)
    ids = [f"P{i}" for i in range(40)]

    def flips():
        return {t: tuple(bool(x) for x in rng.random(10) < 0.5) for t in ids}

    run = RobustnessRun(
        nominal_full=flips(),
        variants=tuple(VariantOutcomes(name, "docstring", seed, flips())
                       for name in ("ButterFingersPerturbation", "SynonymSubstitution") for seed in range(5)),
    )
    metrics = robustness_metrics(run, ks=(1, 5), bootstrap=BootstrapConfig(resamples=200))
    for group in metrics.categories + metrics.transformations:
        assert group.relative_worse[5] + group.relative_better[5] > 1.0
        assert max(group.relative_worse[5], group.relative_better[5]) <= group.robust_relative[5] <= 1.0
        assert group.robust_relative[1] == pytest.approx(group.relative_worse[1] + group.relative_better[1])
        assert group.interval("robust_relative", 5).high <= 1.0


def test_intervals_survive_the_json_round_trip_and_old_files_still_load():
    rng = np.random.default_rng(0)
    metrics = robustness_metrics(simulated_run(rng, 30), ks=(1,), bootstrap=BootstrapConfig(resamples=100, seed=5))
    again = RobustnessMetrics.from_json(metrics.to_json())
    assert again == metrics
    assert again.nominal_intervals["full"][1].problems == 30
    old = metrics.transformations[0].to_json()
    del old["intervals"]
    assert GroupMetrics.from_json(old).intervals == {}
    assert Interval.from_json({"point": 0.5, "low": 0.4, "high": 0.6, "problems": 3}).note is None


def test_sampled_outcomes_resample_problems_not_samples():
    # One problem, 10 samples of which 4 pass: resampling the problem always gives pass@1 = 0.4, so the
    # bootstrap has no width and Wilson's interval of 0.4 over one problem replaces it; resampling samples
    # would have spread a bootstrap from about 0.1 to 0.7 and claimed ten trials.
    run = RobustnessRun(
        nominal_full={"P1": (True,) * 4 + (False,) * 6},
        variants=(VariantOutcomes("ButterFingersPerturbation", "docstring", 0, {"P1": (True,) * 3 + (False,) * 7}),),
    )
    metrics = robustness_metrics(run, ks=(1, 5), bootstrap=BootstrapConfig(resamples=300))
    interval = metrics.nominal_intervals["full"][1]
    assert (interval.point, interval.problems, interval.method) == (pytest.approx(0.4), 1, "wilson")
    wilson = wilson_interval(0.4, 1)  # a share of 0.4 in one trial
    assert (interval.low, interval.high) == (pytest.approx(wilson.low), pytest.approx(wilson.high))
    robust = metrics.transformations[0].interval("robust_pass", 5)
    assert robust.method == "wilson" and robust.low < robust.point < robust.high


def test_wilson_interval_literal_values() -> None:
    # Agresti & Coull (1998): 0 of 10 gives (0, 0.2775); 5 of 10 gives (0.2366, 0.7634)
    none = wilson_interval(0, 10)
    assert none.point == 0.0 and none.low == pytest.approx(0.0, abs=1e-12) and none.high == pytest.approx(0.27753, abs=1e-5)
    half = wilson_interval(5, 10)
    assert (half.low, half.high) == pytest.approx((0.23659, 0.76341), abs=1e-5)
    every = wilson_interval(30, 30)
    assert every.high == 1.0 and every.low == pytest.approx(0.88649, abs=1e-5) and every.problems == 30
    assert wilson_interval(0, 0) == Interval(None, None, None, 0)
