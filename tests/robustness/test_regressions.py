"""Report examples: nominal passes that fail under a variant, spread over the transformations."""

from quench.robustness.metrics import RobustnessRun, VariantOutcomes
from quench.robustness.regressions import Regression, regressions

T, F = True, False


def variant(name: str, seed: int, outcomes: dict) -> VariantOutcomes:
    return VariantOutcomes(name, "docstring", seed, outcomes)


def test_regressions_spread_over_transformations():
    run = RobustnessRun(
        nominal_full={"P1": (T,), "P2": (T,), "P3": (T,)},
        variants=(
            variant("ButterFingersPerturbation", 0, {"P1": (F,), "P2": (F,), "P3": (T,)}),
            variant("ChangeCharCase", 0, {"P1": (F,), "P3": (F,)}),
        ),
    )
    assert regressions(run, per_category=2) == [
        Regression("P1", "ButterFingersPerturbation", "docstring", 0, 0),
        Regression("P3", "ChangeCharCase", "docstring", 0, 0),  # P1 already shown: P3 first
    ]
    assert len(regressions(run)) == 4
