"""ReCode metrics on hand-made outcomes; every expected value is worked out by hand in the comments."""

import pytest

from quench.errors import QuenchError
from quench.execution import Outcome
from quench.robustness.metrics import (
    GroupMetrics,
    RobustnessMetrics,
    RobustnessRun,
    VariantOutcomes,
    outcomes_from_results,
    problem_counts,
    robust_drop,
    robustness_metrics,
)
from quench.runs.records import ResultRecord

T, F = True, False


def variant(name, seed, outcomes, category="docstring", unchanged=frozenset()):
    return VariantOutcomes(name, category, seed, outcomes, frozenset(unchanged))


def only(metrics: RobustnessMetrics, name: str) -> GroupMetrics:
    (group,) = [g for g in metrics.transformations if g.name == name]
    return group


def test_greedy_worst_case_over_two_seeds():
    # P1 passes everywhere; P2 passes nominally, fails under s0; P3 fails nominally, passes under s1.
    run = RobustnessRun(
        nominal_full={"P1": (T,), "P2": (T,), "P3": (F,)},
        variants=(
            variant("ButterFingersPerturbation", 0, {"P1": (T,), "P2": (F,), "P3": (F,)}),
            variant("ButterFingersPerturbation", 1, {"P1": (T,), "P2": (T,), "P3": (T,)}),
        ),
    )
    g = only(robustness_metrics(run), "ButterFingersPerturbation")
    assert g.pass_at_k == {1: pytest.approx(2 / 3)}  # P1, P2
    assert g.robust_pass == {1: pytest.approx(1 / 3)}  # worst case: only P1 passes in both seeds
    assert g.robust_drop == {1: pytest.approx(0.5)}  # (2/3 − 1/3) / (2/3)
    assert g.relative_worse == {1: pytest.approx(1 / 3)}  # P2: pass → fail under s0
    # P3 fails nominally and passes under s1 (fails under s0): it changed, so it counts (its best
    # case differs from the nominal result, as in ReCode's report code).
    assert g.relative_better == {1: pytest.approx(1 / 3)}
    assert g.robust_relative == {1: pytest.approx(2 / 3)}  # P2 and P3 changed
    assert (g.seeds, g.problems, g.variants_total, g.variants_valid) == ((0, 1), 3, 6, 6)


def test_a_perturbation_that_fixes_a_failing_problem_counts_in_relative_only():
    # P2 fails nominally and passes under every seed: RP rises above Pass, RR counts the change.
    run = RobustnessRun(
        nominal_full={"P1": (T,), "P2": (F,)},
        variants=(variant("FuncRenameCamelCase", 0, {"P1": (T,), "P2": (T,)}, "function_name"),),
    )
    g = only(robustness_metrics(run), "FuncRenameCamelCase")
    assert g.pass_at_k[1] == pytest.approx(0.5)  # P1
    assert g.robust_pass[1] == pytest.approx(1.0)  # P1 and P2
    assert g.robust_drop[1] == pytest.approx(-1.0)  # (0.5 − 1) / 0.5: a negative drop
    assert g.relative_worse[1] == 0.0
    assert g.relative_better[1] == pytest.approx(0.5)  # P2 of 2 problems
    assert g.robust_relative[1] == pytest.approx(0.5)


def test_missing_variants_count_worst_case_over_valid_ones_and_nominal_when_none():
    # s0 is valid only for P1 (fails); s1 for P1 (passes) and P2 (passes); P3 has no valid variant.
    run = RobustnessRun(
        nominal_full={"P1": (T,), "P2": (T,), "P3": (F,)},
        variants=(
            variant("SynonymSubstitution", 0, {"P1": (F,)}),
            variant("SynonymSubstitution", 1, {"P1": (T,), "P2": (T,)}, unchanged={"P2"}),
        ),
    )
    g = only(robustness_metrics(run), "SynonymSubstitution")
    # P1: worst of [F, T] = F; P2: worst of [T] = T; P3: nominal F stands.
    assert g.robust_pass[1] == pytest.approx(1 / 3)
    assert g.pass_at_k[1] == pytest.approx(2 / 3)
    assert g.robust_drop[1] == pytest.approx(0.5)
    assert g.robust_relative[1] == pytest.approx(1 / 3)  # P1 only; P3 unchanged by definition
    assert g.problems_without_variant == 1  # P3
    assert g.variants_total == 6  # 3 problems × 2 seeds
    assert g.variants_valid == 3  # s0: P1; s1: P1, P2
    assert g.variants_changed == 2  # P2 under s1 is the nominal prompt


def test_a_drop_without_nominal_passes_is_withheld_with_its_reason():
    assert robust_drop(0.0, 0.0) is None
    assert robust_drop(0.0, 0.5) is None
    assert robust_drop(0.5, 0.25) == pytest.approx(0.5)
    # Nothing passes nominally nor perturbed: no drop to give (null, not 0.0).
    run = RobustnessRun(
        nominal_full={"P1": (F,), "P2": (F,)},
        variants=(variant("ChangeCharCase", 0, {"P1": (F,), "P2": (F,)}),),
    )
    g = only(robustness_metrics(run), "ChangeCharCase")
    assert (g.pass_at_k[1], g.robust_pass[1], g.robust_drop[1], g.robust_relative[1]) == (0.0, 0.0, None, 0.0)
    written = g.to_json()
    assert written["robust_drop"] == {"1": None}
    assert written["robust_drop_withheld"] == {"1": "Pass@k is 0: no nominal pass to drop"}
    # Nothing passes nominally but P1 passes in both seeds: RP = 1/2, the drop is undefined.
    run = RobustnessRun(
        nominal_full={"P1": (F,), "P2": (F,)},
        variants=(
            variant("ChangeCharCase", 0, {"P1": (T,), "P2": (F,)}),
            variant("ChangeCharCase", 1, {"P1": (T,), "P2": (F,)}),
        ),
    )
    g = only(robustness_metrics(run), "ChangeCharCase")
    assert g.robust_pass[1] == pytest.approx(0.5)
    assert g.robust_drop[1] is None
    assert g.to_json()["robust_drop_withheld"] == {"1": "Pass@k is 0 < RP@k: the drop is undefined"}
    assert g.robust_relative[1] == pytest.approx(0.5)  # P1 changed (fail → pass)


def test_sampling_four_samples_two_seeds_several_k():
    # pass@k(n=4, c): @1 = c/4; @2 = 1 − C(4−c, 2)/6; @4 = 1 if c ≥ 1.
    # P1 nominal (T,T,F,F) c=2; s0 (T,F,F,T); s1 (T,T,F,F)
    #    worst (T,F,F,F) rc=1; worse: index 1; better: index 3 (passes under s0)
    # P2 nominal (T,T,T,T) c=4; s0 all T; s1 (F,T,T,T) → worst rc=3; worse: index 0; better: none
    run = RobustnessRun(
        nominal_full={"P1": (T, T, F, F), "P2": (T, T, T, T)},
        variants=(
            variant("WhitespacePerturbation", 0, {"P1": (T, F, F, T), "P2": (T, T, T, T)}),
            variant("WhitespacePerturbation", 1, {"P1": (T, T, F, F), "P2": (F, T, T, T)}),
        ),
    )
    metrics = robustness_metrics(run, ks=(1, 2, 4, 10))
    assert metrics.ks == (1, 2, 4)  # k=10 > n=4 is not reported
    assert metrics.samples == 4
    g = only(metrics, "WhitespacePerturbation")
    # Pass: P1 (0.5, 5/6, 1), P2 (1, 1, 1)
    assert g.pass_at_k == pytest.approx({1: 0.75, 2: 11 / 12, 4: 1.0})
    # RP: P1 rc=1 → (0.25, 1 − 3/6 = 0.5, 1); P2 rc=3 → (0.75, 1 − 0/6 = 1, 1)
    assert g.robust_pass == pytest.approx({1: 0.5, 2: 0.75, 4: 1.0})
    # RD: (0.75 − 0.5)/0.75 = 1/3; (11/12 − 9/12)/(11/12) = 2/11; 0
    assert g.robust_drop == pytest.approx({1: 1 / 3, 2: 2 / 11, 4: 0.0})
    # RR^[-]: one index each → per problem (0.25, 0.5, 1); mean (0.25, 0.5, 1)
    assert g.relative_worse == pytest.approx({1: 0.25, 2: 0.5, 4: 1.0})
    # RR^[+]: P1 one index → (0.25, 0.5, 1), P2 none → 0; mean (0.125, 0.25, 0.5)
    assert g.relative_better == pytest.approx({1: 0.125, 2: 0.25, 4: 0.5})
    # RR: pass@k of the changed count (RC⁻ + RC⁺), a proportion even for k > 1 where RR⁻ + RR⁺ = 1.5:
    # P1 two changed indices → (0.5, 5/6, 1), P2 one → (0.25, 0.5, 1); mean (0.375, 2/3, 1)
    assert g.robust_relative == pytest.approx({1: 0.375, 2: 2 / 3, 4: 1.0})
    assert metrics.nominal_pass == {"full": pytest.approx({1: 0.75, 2: 11 / 12, 4: 1.0})}


def test_category_is_worst_case_over_all_its_transformations_and_seeds():
    # Two docstring transformations; one code-format transformation against the partial prompt.
    run = RobustnessRun(
        nominal_full={"P1": (T,), "P2": (T,)},
        nominal_partial={"P1": (F,), "P2": (T,)},
        variants=(
            variant("ButterFingersPerturbation", 0, {"P1": (F,), "P2": (T,)}),
            variant("ChangeCharCase", 0, {"P1": (T,), "P2": (F,)}),
            variant("new_lines", 0, {"P1": (T,), "P2": (T,)}, "code_format"),
        ),
    )
    metrics = robustness_metrics(run)
    docstring, code_format = metrics.categories
    # Each docstring transformation alone: RP = 1/2; the category's worst case loses both: RP = 0.
    assert only(metrics, "ButterFingersPerturbation").robust_pass[1] == pytest.approx(0.5)
    assert only(metrics, "ChangeCharCase").robust_pass[1] == pytest.approx(0.5)
    assert (docstring.name, docstring.baseline, docstring.robust_pass[1]) == ("docstring", "full", 0.0)
    assert docstring.robust_drop[1] == pytest.approx(1.0)
    assert docstring.transformations == ("ButterFingersPerturbation", "ChangeCharCase")
    assert docstring.variants_total == 4  # 2 problems × 2 transformations × 1 seed
    # Code format compares with the partial prompt: P1 fails there, passes perturbed.
    assert (code_format.baseline, code_format.pass_at_k[1], code_format.robust_pass[1]) == ("partial", 0.5, 1.0)
    assert code_format.robust_relative[1] == pytest.approx(0.5)
    assert metrics.nominal_pass == {"full": {1: 1.0}, "partial": {1: 0.5}}


def test_problem_counts_with_no_variant_keep_the_nominal():
    assert problem_counts((T, F, T), []) == problem_counts((T, F, T), [(T, F, T)])
    counts = problem_counts((T, F), [(F, T), (T, T)])
    assert (counts.n, counts.nominal, counts.robust, counts.worse, counts.better) == (2, 1, 1, 1, 1)


def test_bad_inputs_are_refused():
    with pytest.raises(QuenchError, match="no nominal"):
        robustness_metrics(RobustnessRun({"P1": (T,)}, (variant("X", 0, {"P9": (T,)}),)))
    with pytest.raises(QuenchError, match="samples"):
        robustness_metrics(RobustnessRun({"P1": (T, T)}, (variant("X", 0, {"P1": (T,)}),)))
    with pytest.raises(QuenchError, match="twice"):
        robustness_metrics(RobustnessRun({"P1": (T,)}, (variant("X", 0, {}), variant("X", 0, {}))))
    with pytest.raises(QuenchError, match="partial"):
        robustness_metrics(RobustnessRun({"P1": (T,)}, (variant("new_lines", 0, {}, "code_format"),)))
    with pytest.raises(QuenchError, match="at least k"):
        robustness_metrics(RobustnessRun({"P1": (T,)}, ()), ks=(5,))


def test_metrics_json_round_trip():
    run = RobustnessRun(
        nominal_full={"P1": (T, F), "P2": (F, F)},
        variants=(variant("ChangeCharCase", 0, {"P1": (F, F), "P2": (T, F)}),),
    )
    metrics = robustness_metrics(run, ks=(1, 2))
    assert RobustnessMetrics.from_json(metrics.to_json()) == metrics


def test_outcomes_from_result_records():
    def result(task: str, index: int, passed: bool) -> ResultRecord:
        return ResultRecord(Outcome.passed if passed else Outcome.failed, passed, task_id=task, sample_index=index)

    records = [result("P1", 1, False), result("P1", 0, True), result("P2", 0, False)]
    assert outcomes_from_results(records) == {"P1": (T, F), "P2": (F,)}
    with pytest.raises(QuenchError, match="sample indices"):
        outcomes_from_results([result("P1", 1, True)])
    with pytest.raises(QuenchError, match="names no sample"):
        outcomes_from_results([ResultRecord(Outcome.passed, True, program_id="abc")])
