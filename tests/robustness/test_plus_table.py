"""MBPP+ robustness: base and base + extra inputs side by side, one row per category and transformation."""

from quench.robustness.metrics import RobustnessRun, VariantOutcomes, robustness_metrics
from quench.robustness.plus_table import side_by_side

T, F = True, False


def metrics(nominal: dict, perturbed: dict):
    run = RobustnessRun(nominal_full=nominal,
                        variants=(VariantOutcomes("ButterFingersPerturbation", "docstring", 0, perturbed),))
    return robustness_metrics(run)


def test_plus_columns_show_what_the_extra_inputs_catch() -> None:
    # P1 passes everywhere on the base inputs; on the extra inputs its perturbed sample is wrong.
    base = metrics({"P1": (T,), "P2": (T,)}, {"P1": (T,), "P2": (T,)})
    plus = metrics({"P1": (T,), "P2": (T,)}, {"P1": (F,), "P2": (T,)})
    table = side_by_side(base, plus)
    assert table[0] == ("| group | Pass@1 base | Pass@1 plus | RP@1 base | RP@1 plus | RD@1 base | RD@1 plus "
                        "| RR@1 base | RR@1 plus |")
    assert "| docstring | 100.0 | 100.0 | 100.0 | 50.0 | 0.0 | 50.0 | 0.0 | 50.0 |" in table
    assert "| ButterFingersPerturbation | 100.0 | 100.0 | 100.0 | 50.0 | 0.0 | 50.0 | 0.0 | 50.0 |" in table
