"""One report example: a prompt whose sample passed nominally and failed once perturbed."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Mapping


@dataclass(frozen=True)
class Example:
    """Both prompts, both completions and how each ran, for one (task, transformation, seed, sample)."""

    task_id: str
    transformation: str
    category: str
    seed: int
    nominal_prompt: str  # the baseline prompt: full for docstring/function name, partial for code
    perturbed_prompt: str
    nominal_completion: str
    perturbed_completion: str
    nominal_detail: str  # outcome of the nominal sample, e.g. "passed"
    perturbed_detail: str  # e.g. "failed: AssertionError: ..."
    sample: int = 0  # sample index (0 under greedy decoding)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping) -> Example:
        return cls(**data)


def split_detail(detail: str) -> tuple[str, str]:
    """`"failed: AssertionError: …"` → ("failed", "AssertionError: …"): the outcome a heading shows, and the
    detail shown under it (a base-input pass keeps its extra inputs' failure there, not in the heading)."""
    outcome, _, rest = detail.partition(": ")
    return outcome.strip(), rest.strip()
