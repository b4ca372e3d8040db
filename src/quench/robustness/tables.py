"""Table cells shared by the Markdown and HTML reports and the console summary."""

from __future__ import annotations

from typing import Mapping

from quench.robustness.metrics import MIN_CHANGED_PROBLEMS, GroupMetrics
from quench.stats.figures import percent, percent_interval
from quench.stats.intervals import BootstrapConfig, Interval

def method_note(bootstrap: BootstrapConfig) -> str:
    """The paragraph under the report's tables: units, the interval method, what each column counts."""
    return (
        f"Percentages, each with its {100 * bootstrap.confidence:g}% interval [low, high]: a bootstrap over "
        f"problems ({bootstrap.resamples:,} resamples, seed {bootstrap.seed}), nominal and perturbed results of "
        "a problem resampled together; where every problem has the same value, the exact Clopper-Pearson "
        "bound for 0 (or all) of them instead of a zero-width interval. Worst case over the seeds of a transformation, over every "
        "transformation × seed of a category. RR: samples whose result changed under some variant; RR⁻ / RR⁺: "
        f"pass → fail / fail → pass. RD needs at least {bootstrap.min_nominal_passes} problems passing "
        "nominally (\"too few nominal passes\" otherwise). Valid variants passed the meaning check; a problem "
        "with none keeps its nominal result. Changed: valid variants whose prompt differs from the nominal "
        "one. Problems changed: problems with such a variant; \"(few)\" marks a row resting on fewer than "
        f"{MIN_CHANGED_PROBLEMS}, whose RP, RD and RR describe those problems alone. Definitions: docs/robustness.md."
    )

# run_info keys shown under a clearer name in the report's "Run" section
RUN_LABELS = {"n": "samples per prompt (n)", "seeds": "seeds per transformation (s)", "seconds": "wall time (s)",
              "same_model_input": "variants the prompt format cancels (changed prompt, same model input)"}


def with_interval(value: float | None, interval: Interval | None) -> str:
    """`12.2% [7.3%, 17.7%]`; the interval's note (e.g. too few nominal passes) replaces the number."""
    if interval is None:
        return percent(value)
    if interval.note:
        return interval.note
    return percent_interval(value, interval.low, interval.high)


def metric_header(k: int, seeds_mark: str = "_s") -> list[str]:
    return [f"Pass@{k}", f"RP{seeds_mark}@{k}", f"RD{seeds_mark}@{k}", f"RR{seeds_mark}@{k}", "RR⁻ / RR⁺",
            "Valid variants", "Changed", "Problems changed"]


def group_cells(group: GroupMetrics, k: int) -> list[str]:
    """The cells under `metric_header(k)` for one category or transformation, each with its 95% interval."""
    def cell(name: str) -> str:
        return with_interval(getattr(group, name)[k], group.interval(name, k))

    return [
        cell("pass_at_k"), cell("robust_pass"), cell("robust_drop"), cell("robust_relative"),
        f"{cell('relative_worse')} / {cell('relative_better')}",
        f"{group.variants_valid}/{group.variants_total}", str(group.variants_changed), changed_problems(group),
    ]


def changed_problems(group: GroupMetrics) -> str:
    """`4 of 100 (few)`: the problems whose prompt the row's variants changed, flagged below the threshold."""
    if group.problems_changed is None:
        return "n/a"
    return f"{group.problems_changed} of {group.problems}" + (" (few)" if group.few_changed else "")


def _readable(key: str, value: object) -> str:
    if key == "stop" and isinstance(value, (list, tuple)):
        shown = ", ".join(repr(s) for s in value)
        return f"{len(value)} sequence{'s' if len(value) != 1 else ''}: {shown}" if value else "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):  # per transformation: counts, the nonzero ones named
        shown = [f"{name}: {_readable(name, count)}" for name, count in value.items() if count not in (0, None, "")]
        return ", ".join(shown) if shown else "none"
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value))
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def run_rows(run_info: Mapping[str, object]) -> list[tuple[str, str]]:
    """The "Run" section as (label, text) rows: unset settings (None, empty) are left out."""
    return [(RUN_LABELS.get(key, key.replace("_", " ")), _readable(key, value))
            for key, value in run_info.items() if value is not None and value != [] and value != ""]
