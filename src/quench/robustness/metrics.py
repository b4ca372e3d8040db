"""ReCode robustness metrics (Wang et al., ACL 2023, §4): Robust Pass, Robust Drop and Robust Relative at k.

Glossary (docs/robustness.md has the formulas):
- nominal: pass/fail of each sample index on the unperturbed prompt. Docstring and function-name
  variants are compared with the full prompt, code-syntax and code-format variants with the
  partial-code prompt (ReCode's baselines; `groups.baseline_of`).
- variant: one (transformation, seed) version of the benchmark. A task missing from a variant was
  invalid (the perturbation failed the meaning check) and is left out of the worst case; a task whose
  prompt the transformation did not change is present with the nominal results.
- worst case: sample index i of a problem counts as correct only if it passes in every valid variant
  of the group (one transformation's seeds, or every transformation × seed of a category). A problem
  with no valid variant in the group keeps its nominal result.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np

from quench.errors import QuenchError
from quench.perturbations.base import CATEGORIES, RECODE_ORDER
from quench.robustness.groups import FULL, PARTIAL, baseline_of
from quench.runs.records import ResultRecord
from quench.stats.intervals import BootstrapConfig, Interval, canonical, drop_interval, mean_intervals
from quench.stats.passk import mean_pass_at_k, pass_at_k_per_problem

Outcomes = Mapping[str, tuple[bool, ...]]  # task_id → pass/fail of each sample index

# A row whose transformations changed the prompt of fewer problems than this is flagged: its RP, RD
# and RR describe those few problems (the rest keep their nominal result), whatever the row's size.
MIN_CHANGED_PROBLEMS = 20


@dataclass(frozen=True)
class VariantOutcomes:
    """Per-sample pass/fail of the model on one (transformation, seed) variant of the benchmark."""

    transformation: str
    category: str
    seed: int
    outcomes: Outcomes  # a task absent here was an invalid variant and is left out
    unchanged: frozenset[str] = frozenset()  # tasks whose prompt the transformation left as is


@dataclass(frozen=True)
class RobustnessRun:
    """Everything the metrics need: the two nominal baselines and every variant's outcomes."""

    nominal_full: Outcomes
    variants: tuple[VariantOutcomes, ...]
    nominal_partial: Outcomes = field(default_factory=dict)  # needed only for code categories

    def baseline(self, category: str) -> Outcomes:
        return self.nominal_full if baseline_of(category) == FULL else self.nominal_partial


@dataclass(frozen=True)
class GroupMetrics:
    """Worst-case metrics of one transformation (over its seeds) or one category (over all of it)."""

    name: str  # the transformation, or the category for a category row
    category: str
    baseline: str  # "full" or "partial": the nominal prompt the variants are compared with
    transformations: tuple[str, ...]
    seeds: tuple[int, ...]
    problems: int
    problems_without_variant: int  # no valid variant in the group: they keep their nominal result
    variants_total: int  # (problem, transformation, seed) triples asked for
    variants_valid: int  # ... of which passed the meaning check
    variants_changed: int  # ... of which the prompt actually differs from the nominal one
    pass_at_k: dict[int, float]  # nominal Pass@k on the baseline problems
    robust_pass: dict[int, float]  # RP_s@k
    robust_drop: dict[int, float | None]  # RD_s@k; None (withheld, reason in to_json) when Pass@k = 0
    robust_relative: dict[int, float]  # RR_s@k: pass@k of the samples changed in either direction
    relative_worse: dict[int, float]  # RR^[-]_s@k: pass nominally, fail under some variant
    relative_better: dict[int, float]  # RR^[+]_s@k: fail nominally, pass under some variant
    intervals: dict[int, dict[str, Interval]] = field(default_factory=dict)  # k → metric field name → interval
    problems_changed: int | None = None  # problems with a valid variant whose prompt differs (None: an older file)

    def interval(self, metric: str, k: int) -> Interval | None:
        return self.intervals.get(k, {}).get(metric)

    @property
    def few_changed(self) -> bool:
        """The row rests on fewer than MIN_CHANGED_PROBLEMS problems whose prompt its variants changed."""
        return self.problems_changed is not None and self.problems_changed < MIN_CHANGED_PROBLEMS

    def to_json(self) -> dict:
        def by_k(values: Mapping[int, float | None]) -> dict[str, float | None]:
            return {str(k): v for k, v in values.items()}

        return {
            "name": self.name, "category": self.category, "baseline": self.baseline,
            "transformations": list(self.transformations), "seeds": list(self.seeds),
            "problems": self.problems, "problems_without_variant": self.problems_without_variant,
            "variants_total": self.variants_total, "variants_valid": self.variants_valid,
            "variants_changed": self.variants_changed,
            "problems_changed": self.problems_changed, "few_changed": self.few_changed,
            "min_changed_problems": MIN_CHANGED_PROBLEMS,
            "pass_at_k": by_k(self.pass_at_k), "robust_pass": by_k(self.robust_pass),
            "robust_drop": by_k(self.robust_drop),
            "robust_drop_withheld": {str(k): drop_withheld(self.pass_at_k[k], self.robust_pass[k])
                                     for k, v in self.robust_drop.items() if v is None},
            "robust_relative": by_k(self.robust_relative),
            "relative_worse": by_k(self.relative_worse), "relative_better": by_k(self.relative_better),
            "intervals": intervals_to_json(self.intervals),
        }

    @classmethod
    def from_json(cls, data: Mapping) -> GroupMetrics:
        def by_k(values: Mapping[str, float | None]) -> dict:
            return {int(k): v for k, v in values.items()}

        return cls(
            name=data["name"], category=data["category"], baseline=data["baseline"],
            transformations=tuple(data["transformations"]), seeds=tuple(data["seeds"]),
            problems=data["problems"], problems_without_variant=data["problems_without_variant"],
            variants_total=data["variants_total"], variants_valid=data["variants_valid"],
            variants_changed=data["variants_changed"],
            pass_at_k=by_k(data["pass_at_k"]), robust_pass=by_k(data["robust_pass"]),
            robust_drop=by_k(data["robust_drop"]), robust_relative=by_k(data["robust_relative"]),
            relative_worse=by_k(data["relative_worse"]), relative_better=by_k(data["relative_better"]),
            intervals=intervals_from_json(data.get("intervals", {})),
            problems_changed=data.get("problems_changed"),
        )


@dataclass(frozen=True)
class RobustnessMetrics:
    """The whole result: nominal Pass@k per baseline, then one row per category and per transformation."""

    ks: tuple[int, ...]  # every reported k (each problem has at least k samples)
    samples: int  # n: samples per problem (the smallest, if they differ)
    nominal_problems: dict[str, int]  # "full"/"partial" → number of problems
    nominal_pass: dict[str, dict[int, float]]  # "full"/"partial" → Pass@k
    categories: tuple[GroupMetrics, ...]
    transformations: tuple[GroupMetrics, ...]
    nominal_intervals: dict[str, dict[int, Interval]] = field(default_factory=dict)  # "full"/"partial" → k → Pass@k
    bootstrap: BootstrapConfig = BootstrapConfig()

    def to_json(self) -> dict:
        return {
            "ks": list(self.ks), "samples": self.samples,
            "nominal_problems": dict(self.nominal_problems),
            "nominal_pass": {kind: {str(k): v for k, v in p.items()} for kind, p in self.nominal_pass.items()},
            "nominal_intervals": {kind: {str(k): i.to_json() for k, i in by_k.items()}
                                  for kind, by_k in self.nominal_intervals.items()},
            "bootstrap": {"resamples": self.bootstrap.resamples, "seed": self.bootstrap.seed,
                          "confidence": self.bootstrap.confidence,
                          "min_nominal_passes": self.bootstrap.min_nominal_passes},
            "categories": [g.to_json() for g in self.categories],
            "transformations": [g.to_json() for g in self.transformations],
        }

    @classmethod
    def from_json(cls, data: Mapping) -> RobustnessMetrics:
        return cls(
            ks=tuple(data["ks"]), samples=data["samples"],
            nominal_problems=dict(data["nominal_problems"]),
            nominal_pass={kind: {int(k): v for k, v in p.items()} for kind, p in data["nominal_pass"].items()},
            categories=tuple(GroupMetrics.from_json(g) for g in data["categories"]),
            transformations=tuple(GroupMetrics.from_json(g) for g in data["transformations"]),
            nominal_intervals={kind: {int(k): Interval.from_json(i) for k, i in by_k.items()}
                               for kind, by_k in data.get("nominal_intervals", {}).items()},
            bootstrap=BootstrapConfig(**data.get("bootstrap", {})),
        )


def intervals_to_json(intervals: Mapping[int, Mapping[str, Interval]]) -> dict:
    return {str(k): {name: i.to_json() for name, i in by_name.items()} for k, by_name in intervals.items()}


def intervals_from_json(data: Mapping) -> dict[int, dict[str, Interval]]:
    return {int(k): {name: Interval.from_json(i) for name, i in by_name.items()} for k, by_name in data.items()}


@dataclass(frozen=True)
class ProblemCounts:
    """Counts of sample indices for one problem under one group of variants (ReCode's c, rc, RC)."""

    n: int  # samples
    nominal: int  # c: correct on the nominal prompt
    robust: int  # rc_s: correct in every valid variant
    worse: int  # RC^[-]_s: correct nominally, incorrect in some valid variant
    better: int  # RC^[+]_s: incorrect nominally, correct in some valid variant

    @property
    def changed(self) -> int:
        """Samples whose result differs under some variant, either way (worse and better are disjoint)."""
        return self.worse + self.better


def problem_counts(nominal: Sequence[bool], variants: Sequence[Sequence[bool]]) -> ProblemCounts:
    """Worst/best case over `variants` per sample index; no variant means the nominal result stands."""
    if not variants:
        variants = [nominal]
    worst = [all(v[i] for v in variants) for i in range(len(nominal))]
    best = [any(v[i] for v in variants) for i in range(len(nominal))]
    return ProblemCounts(
        n=len(nominal),
        nominal=sum(nominal),
        robust=sum(worst),
        worse=sum(c and not w for c, w in zip(nominal, worst)),
        better=sum(b and not c for c, b in zip(nominal, best)),
    )


def robust_drop(nominal: float, robust: float) -> float | None:
    """RD = (Pass@k − RP@k) / Pass@k; withheld (None) where Pass@k = 0: see `drop_withheld`."""
    if nominal == 0.0:
        return None
    return (nominal - robust) / nominal


def drop_withheld(nominal: float, robust: float) -> str | None:
    """Why RD is withheld (written beside its `null` in metrics.json), or None where it is given."""
    if nominal != 0.0:
        return None
    return "Pass@k is 0: no nominal pass to drop" if robust == 0.0 else "Pass@k is 0 < RP@k: the drop is undefined"


def _check_variant(variant: VariantOutcomes, baseline: Outcomes, baseline_kind: str) -> None:
    unknown = sorted(variant.outcomes.keys() - baseline.keys())
    if unknown:
        raise QuenchError(
            f"{variant.transformation} seed {variant.seed}: task(s) {', '.join(unknown[:5])} have no "
            f"nominal {baseline_kind}-prompt result"
        )
    for task_id, results in variant.outcomes.items():
        if len(results) != len(baseline[task_id]):
            raise QuenchError(
                f"{variant.transformation} seed {variant.seed}, {task_id}: {len(results)} samples, "
                f"but the nominal prompt has {len(baseline[task_id])}"
            )


GROUP_METRICS = ("pass_at_k", "robust_pass", "robust_relative", "relative_worse", "relative_better")


def per_problem_values(counts: Sequence[ProblemCounts], k: int) -> np.ndarray:
    """(problems, 5) per-problem pass@k of the counts behind GROUP_METRICS: c, rc, RC⁻ + RC⁺, RC⁻, RC⁺."""
    columns = [[(c.n, c.nominal) for c in counts], [(c.n, c.robust) for c in counts],
               [(c.n, c.changed) for c in counts], [(c.n, c.worse) for c in counts],
               [(c.n, c.better) for c in counts]]
    return np.array([pass_at_k_per_problem(column, k) for column in columns], dtype=float).T.reshape(len(counts), 5)


def group_intervals(counts: Sequence[ProblemCounts], ks: Sequence[int], bootstrap: BootstrapConfig) -> dict[int, dict[str, Interval]]:
    """Bootstrap intervals of every metric of a group at each k; RD from the same resamples as Pass and RP."""
    passing = sum(c.nominal > 0 for c in counts)
    intervals = {}
    for k in ks:
        values = per_problem_values(counts, k)  # (problems, 5)
        by_name = dict(zip(GROUP_METRICS, mean_intervals(values, bootstrap)))
        by_name["robust_drop"] = drop_interval(values[:, 0], values[:, 1], passing, bootstrap)
        intervals[k] = by_name
    return intervals


def group_metrics(
    name: str, category: str, run: RobustnessRun, variants: Sequence[VariantOutcomes], ks: Sequence[int],
    bootstrap: BootstrapConfig = BootstrapConfig(),
) -> GroupMetrics:
    """Worst case over every variant in `variants` (all of the same category) against its baseline."""
    kind = baseline_of(category)
    baseline = run.baseline(category)
    if not baseline:
        raise QuenchError(f"{name}: no nominal {kind}-prompt results to compare its variants with")
    for variant in variants:
        _check_variant(variant, baseline, kind)
    counts = []
    without_variant = changed_problems = 0
    for task_id in canonical({t: t for t in baseline}):  # the order problems are resampled in
        nominal = baseline[task_id]
        valid = [v.outcomes[task_id] for v in variants if task_id in v.outcomes]
        without_variant += not valid
        changed_problems += any(task_id in v.outcomes and task_id not in v.unchanged for v in variants)
        counts.append(problem_counts(nominal, valid))
    nominal_pass = mean_pass_at_k([(c.n, c.nominal) for c in counts], ks)
    robust_pass = mean_pass_at_k([(c.n, c.robust) for c in counts], ks)
    worse = mean_pass_at_k([(c.n, c.worse) for c in counts], ks)
    better = mean_pass_at_k([(c.n, c.better) for c in counts], ks)
    # pass@k of the changed count, not worse + better: the sum counts a k-draw holding both a
    # pass → fail and a fail → pass sample twice and can exceed 1 for k > 1.
    changed = mean_pass_at_k([(c.n, c.changed) for c in counts], ks)
    valid_total = sum(len(v.outcomes) for v in variants)
    return GroupMetrics(
        name=name,
        category=category,
        baseline=kind,
        transformations=ordered_transformations({v.transformation for v in variants}),
        seeds=tuple(sorted({v.seed for v in variants})),
        problems=len(baseline),
        problems_without_variant=without_variant,
        variants_total=len(baseline) * len(variants),
        variants_valid=valid_total,
        variants_changed=valid_total - sum(len(v.unchanged & v.outcomes.keys()) for v in variants),
        pass_at_k=nominal_pass,
        robust_pass=robust_pass,
        robust_drop={k: robust_drop(nominal_pass[k], robust_pass[k]) for k in nominal_pass},
        robust_relative=changed,
        relative_worse=worse,
        relative_better=better,
        intervals=group_intervals(counts, tuple(nominal_pass), bootstrap),
        problems_changed=changed_problems,
    )


def ordered_transformations(transformations: Iterable[str]) -> tuple[str, ...]:
    order = {name: i for i, name in enumerate(RECODE_ORDER)}
    return tuple(sorted(transformations, key=lambda t: (order.get(t, len(order)), t)))


def _reported_ks(run: RobustnessRun, ks: Sequence[int]) -> tuple[tuple[int, ...], int]:
    sizes = [len(r) for baseline in (run.nominal_full, run.nominal_partial) for r in baseline.values()]
    if not sizes:
        raise QuenchError("no nominal results: the robustness metrics need at least one problem")
    smallest = min(sizes)
    reported = tuple(k for k in sorted(set(ks)) if 1 <= k <= smallest)
    if not reported:
        raise QuenchError(f"k={', '.join(map(str, ks))}: every k needs at least k samples per problem (n={smallest})")
    return reported, smallest


def robustness_metrics(
    run: RobustnessRun, ks: Sequence[int] = (1,), bootstrap: BootstrapConfig = BootstrapConfig()
) -> RobustnessMetrics:
    """RP_s@k, RD_s@k and RR_s@k per transformation and per category (ReCode §4), for each k ≤ n, with intervals."""
    reported, smallest = _reported_ks(run, ks)
    by_transformation: dict[str, list[VariantOutcomes]] = defaultdict(list)
    by_category: dict[str, list[VariantOutcomes]] = defaultdict(list)
    seen: set[tuple[str, int]] = set()
    for variant in run.variants:
        if (variant.transformation, variant.seed) in seen:
            raise QuenchError(f"{variant.transformation} seed {variant.seed} given twice")
        seen.add((variant.transformation, variant.seed))
        by_transformation[variant.transformation].append(variant)
        by_category[variant.category].append(variant)
    for name, variants in by_transformation.items():
        if len({v.category for v in variants}) > 1:
            raise QuenchError(f"transformation {name!r} is listed under more than one category")
    category_order = {c: i for i, c in enumerate(CATEGORIES)}
    categories = tuple(
        group_metrics(category, category, run, by_category[category], reported, bootstrap)
        for category in sorted(by_category, key=lambda c: (category_order.get(c, len(category_order)), c))
    )
    transformations = tuple(
        group_metrics(name, by_transformation[name][0].category, run, by_transformation[name], reported, bootstrap)
        for name in ordered_transformations(by_transformation)
    )
    baselines = {FULL: run.nominal_full, PARTIAL: run.nominal_partial}
    return RobustnessMetrics(
        ks=reported,
        samples=smallest,
        nominal_problems={kind: len(b) for kind, b in baselines.items() if b},
        nominal_pass={
            kind: mean_pass_at_k([(len(r), sum(r)) for r in b.values()], reported) for kind, b in baselines.items() if b
        },
        categories=categories,
        transformations=transformations,
        nominal_intervals={kind: nominal_intervals(b, reported, bootstrap) for kind, b in baselines.items() if b},
        bootstrap=bootstrap,
    )


def nominal_intervals(outcomes: Outcomes, ks: Sequence[int], bootstrap: BootstrapConfig) -> dict[int, Interval]:
    """Pass@k of one baseline with its interval, resampling its problems."""
    counts = [(len(r), sum(r)) for r in canonical(outcomes)]
    return {k: mean_intervals(np.array(pass_at_k_per_problem(counts, k))[:, None], bootstrap)[0] for k in ks}


def outcomes_from_results(records: Iterable[ResultRecord]) -> dict[str, tuple[bool, ...]]:
    """Per-task pass/fail tuples from the result records of a `quench run` (task id and sample index set)."""
    by_task: dict[str, dict[int, bool]] = defaultdict(dict)
    for record in records:
        if record.task_id is None or record.sample_index is None:
            raise QuenchError(f"a result record names no sample: {record.to_json()}")
        by_task[record.task_id][record.sample_index] = record.passed
    outcomes = {}
    for task_id, samples in by_task.items():
        if sorted(samples) != list(range(len(samples))):
            raise QuenchError(f"{task_id}: sample indices {sorted(samples)} are not 0..{len(samples) - 1}")
        outcomes[task_id] = tuple(samples[i] for i in range(len(samples)))
    return outcomes
