"""Which prompts of a benchmark a result belongs to: a nominal baseline or one (transformation, seed) variant.

ReCode (§4) compares docstring and function-name variants with the full prompt, code-syntax and
code-format variants with the partial-code prompt: `baseline_of` is that rule, written once. On disk a
group is its `label` (a sample's `variant` field): "nominal/full", "nominal/partial" or "transformation/seed".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

from quench.errors import QuenchError
from quench.perturbations.base import CATEGORIES, CODE_FORMAT, CODE_SYNTAX, DOCSTRING, FUNCTION_NAME

PromptKind = Literal["full", "partial"]
FULL: PromptKind = "full"
PARTIAL: PromptKind = "partial"
BASELINE_OF_CATEGORY: dict[str, PromptKind] = {
    DOCSTRING: FULL, FUNCTION_NAME: FULL, CODE_SYNTAX: PARTIAL, CODE_FORMAT: PARTIAL,
}
NOMINAL = "nominal"  # a nominal group's label begins with it


def baseline_of(category: str) -> PromptKind:
    """The nominal prompt a category's variants are compared with."""
    if category not in BASELINE_OF_CATEGORY:
        raise QuenchError(f"unknown perturbation category {category!r}; choose from {', '.join(CATEGORIES)}")
    return BASELINE_OF_CATEGORY[category]


@dataclass(frozen=True)
class GroupKey:
    """A nominal baseline (no transformation, no seed) or one (transformation, seed) variant of the benchmark."""

    transformation: str | None  # None: the nominal prompt
    seed: int | None  # None: the nominal prompt
    prompt: PromptKind  # a baseline's prompt; for a variant, the baseline it is compared with

    def __post_init__(self) -> None:
        if (self.transformation is None) != (self.seed is None):
            raise ValueError(f"a group has a transformation and a seed, or neither: {self}")
        if self.prompt not in (FULL, PARTIAL):
            raise ValueError(f"prompt must be {FULL!r} or {PARTIAL!r}, got {self.prompt!r}")

    @classmethod
    def nominal(cls, prompt: PromptKind = FULL) -> GroupKey:
        return cls(None, None, prompt)

    @classmethod
    def partial(cls) -> GroupKey:
        return cls(None, None, PARTIAL)

    @classmethod
    def variant(cls, transformation: str, seed: int, category: str) -> GroupKey:
        return cls(transformation, seed, baseline_of(category))

    @property
    def is_nominal(self) -> bool:
        return self.transformation is None

    @property
    def baseline(self) -> GroupKey:
        """The nominal group this one is compared with (a nominal group: itself)."""
        return GroupKey.nominal(self.prompt)

    @property
    def order(self) -> tuple[bool, str, int, str]:
        """Baselines first, then variants by transformation and seed."""
        return (not self.is_nominal, self.transformation or "", self.seed or 0, self.prompt)

    def label(self) -> str:
        """The group as a sample's `variant` field has it: "nominal/full", "nominal/partial" or "transformation/seed"."""
        return f"{NOMINAL}/{self.prompt}" if self.is_nominal else f"{self.transformation}/{self.seed}"

    @classmethod
    def from_label(cls, label: str, category_of: Callable[[str], str]) -> GroupKey:
        """The group a `label` names; `category_of` gives a transformation's category (its baseline)."""
        name, _, rest = label.rpartition("/")
        if name == NOMINAL and rest in (FULL, PARTIAL):
            return cls.nominal(rest)  # type: ignore[arg-type]
        if not name or not rest.isdigit():
            raise QuenchError(f"{label!r}: not a robustness group (nominal/full, nominal/partial or transformation/seed)")
        return cls.variant(name, int(rest), category_of(name))


def is_nominal_label(label: str) -> bool:
    """Whether a sample's `variant` field names a nominal baseline."""
    return label.startswith(f"{NOMINAL}/")
