"""Report examples: sample indices that passed on the nominal prompt and failed under a variant,
spread over the transformations of each category so that varied cases lead."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from quench.perturbations.base import CATEGORIES
from quench.robustness.metrics import RobustnessRun, ordered_transformations


@dataclass(frozen=True)
class Regression:
    """A sample index that passed on the nominal prompt and failed on one variant: a report example."""

    task_id: str
    transformation: str
    category: str
    seed: int
    sample: int


def regressions(run: RobustnessRun, per_category: int | None = None) -> list[Regression]:
    """Nominal-pass → variant-fail cases, by category; with `per_category`, spread over transformations."""
    chosen: list[Regression] = []
    order = {c: i for i, c in enumerate(CATEGORIES)}
    for category in sorted({v.category for v in run.variants}, key=lambda c: (order.get(c, len(order)), c)):
        queues = [_regressions_of(run, name, category) for name in ordered_transformations(
            {v.transformation for v in run.variants if v.category == category})]
        found = _round_robin(queues) if per_category is not None else [r for q in queues for r in q]
        chosen.extend(found[:per_category])
    return chosen


def _regressions_of(run: RobustnessRun, transformation: str, category: str) -> list[Regression]:
    baseline = run.baseline(category)
    found = []
    for variant in sorted((v for v in run.variants if v.transformation == transformation), key=lambda v: v.seed):
        for task_id, results in variant.outcomes.items():
            for i, (nominal, perturbed) in enumerate(zip(baseline.get(task_id, ()), results)):
                if nominal and not perturbed:
                    found.append(Regression(task_id, transformation, category, variant.seed, i))
    return found


def _round_robin(queues: list[list[Regression]]) -> list[Regression]:
    # One case per transformation in turn, tasks not shown yet first: varied examples lead.
    pending = [deque(queue) for queue in queues]
    picked: list[Regression] = []
    repeats: list[Regression] = []
    shown: set[str] = set()
    while any(pending):
        for queue in pending:
            while queue and queue[0].task_id in shown:
                repeats.append(queue.popleft())
            if queue:
                picked.append(queue.popleft())
                shown.add(picked[-1].task_id)
    return picked + repeats
