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
    # every cell carries its interval; two problems that all pass take the exact bound for 2 of 2
    everything = "100.0% [15.8%, 100.0%]"
    row = next(line for line in table if line.startswith("| docstring |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:4] == [everything, everything, everything]
    assert cells[4].startswith("50.0% [") and cells[8].startswith("50.0% [")  # RP and RR on the extra inputs
    assert cells[5] == cells[6] == "too few nominal passes"  # RD rests on 2 nominal passes
    assert cells[7] == "0.0% [0.0%, 84.2%]"  # no base sample changed: 0 of 2, not a certain 0
    assert any(line.startswith("| ButterFingersPerturbation | 100.0% [") for line in table)
