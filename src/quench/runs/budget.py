"""Sampling within a time budget, and BASS's Pass@First / Pass@All (Qian et al., 2024, §5).

`sample_within_budget` keeps every slot of the batch busy with new samples of the prompt until
the budget is spent; samples still running then are dropped. Each result carries `finish_s`
(seconds from the start to its end) in `extra`, in finish order.
- Pass@First: the share of prompts whose first finished sample passes.
- Pass@All: the share of prompts with at least one passing sample finished within the budget.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable, Sequence

from quench.engine.backend import QuenchBackend
from quench.engine.types import GenerationRequest, GenerationResult, SamplingParams


def sample_within_budget(
    backend: QuenchBackend, request: GenerationRequest, sampling: SamplingParams, budget_s: float
) -> list[GenerationResult]:
    """All samples of one prompt that finish within `budget_s` seconds, in finish order."""
    deadline = time.perf_counter() + budget_s
    results = list(backend.generate([request], sampling, deadline=deadline, unbounded=True))
    return sorted(results, key=lambda r: r.extra["finish_s"])


def budget_pass_rates(
    samples_per_prompt: Iterable[Sequence[GenerationResult]], passed: Callable[[GenerationResult], bool]
) -> tuple[float, float]:
    """(Pass@First, Pass@All) over prompts; each prompt's samples in finish order (none = a miss)."""
    first = every = total = 0
    for samples in samples_per_prompt:
        total += 1
        outcomes = [passed(s) for s in samples]
        first += bool(outcomes) and outcomes[0]
        every += any(outcomes)
    return (first / total, every / total) if total else (0.0, 0.0)
