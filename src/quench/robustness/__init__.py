"""ReCode robustness: worst-case metrics (RP/RD/RR at k) over perturbed prompts, and the report."""

from quench.robustness.examples import Example
from quench.robustness.groups import BASELINE_OF_CATEGORY, GroupKey, baseline_of
from quench.robustness.metrics import (
    GroupMetrics,
    Outcomes,
    RobustnessMetrics,
    RobustnessRun,
    VariantOutcomes,
    outcomes_from_results,
    robustness_metrics,
)
from quench.robustness.regressions import Regression, regressions
from quench.robustness.report import load_examples, load_metrics, write_report

__all__ = [
    "BASELINE_OF_CATEGORY",
    "Example",
    "GroupKey",
    "GroupMetrics",
    "Outcomes",
    "Regression",
    "RobustnessMetrics",
    "RobustnessRun",
    "VariantOutcomes",
    "baseline_of",
    "load_examples",
    "load_metrics",
    "outcomes_from_results",
    "regressions",
    "robustness_metrics",
    "write_report",
]
