"""The perturbation interface, its four categories, and seeded application (`catalog.py` names the classes)."""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from typing import ClassVar

from quench.datasets import Problem

DOCSTRING = "docstring"
FUNCTION_NAME = "function_name"
CODE_SYNTAX = "code_syntax"
CODE_FORMAT = "code_format"
CATEGORIES = (DOCSTRING, FUNCTION_NAME, CODE_SYNTAX, CODE_FORMAT)
# ReCode's directory names for the same categories (dataset-release/perturbed_finalized/...).
RECODE_CATEGORY = {DOCSTRING: "nlaugmenter", FUNCTION_NAME: "func_name", CODE_SYNTAX: "natgen", CODE_FORMAT: "format"}
CATEGORY_ALIASES = {alias: name for name, alias in RECODE_CATEGORY.items()} | {c: c for c in CATEGORIES}
RECODE_ORDER = (
    "BackTranslation", "ButterFingersPerturbation", "ChangeCharCase", "EnglishInflectionalVariation",
    "SwapCharactersPerturbation", "SynonymInsertion", "SynonymSubstitution", "TenseTransformationPast",
    "TenseTransformationFuture", "WhitespacePerturbation",
    "FuncRenameCamelCase", "FuncRenameButterFinger", "FuncRenameSwapChar", "FuncRenameChangeChar",
    "FuncRenameInflectionalVariation", "FuncRenameSynonymSub",
    "DeadCodeInserter", "DeadCodeInserterLast", "ForWhileTransformer", "OperandSwap", "VarRenamerCB",
    "VarRenamerNaive", "VarRenamerRN",
    "tab_indent", "split_lines", "doc2comments", "new_lines", "new_line_aftercode", "new_line_afterdoc",
)


class CannotApply(Exception):
    """Raised by `apply` where a transformation applies but cannot write its result (a program
    its rebuild cannot tokenize or format): a counted refusal, never the nominal prompt passed off
    as perturbed. A problem with nothing to transform is returned unchanged instead."""


REFUSED = "refused"  # key in a variant's `extra`: why the transformation refused it


def refusal(problem: Problem) -> str | None:
    """Why the transformation refused this variant, or None."""
    return problem.meta(REFUSED) or None


class Perturbation(ABC):
    """One ReCode transformation: `apply` returns the perturbed problem, or the same one unchanged."""

    name: ClassVar[str]
    category: ClassVar[str]
    description: ClassVar[str]
    randomized: ClassVar[bool] = True  # False: every seed gives the same variant
    model_based: ClassVar[bool] = False  # needs a causal LM (slow; opt-in on the command line)
    splits_itself: ClassVar[bool] = False  # code categories: takes the full problem, not the partial one
    # One generator over the whole problem list in order (ReCode's draws), not one per task: see apply_sequence.
    sequential: ClassVar[bool] = False

    @abstractmethod
    def apply(self, problem: Problem, rng: random.Random) -> Problem:
        """The perturbed problem; `problem` itself when the transformation does not apply."""

    def apply_sequence(self, problems: list[Problem], seed: int) -> list[Problem]:
        """Sequential transformations: every problem in order, drawing from one generator."""
        raise NotImplementedError(f"{self.name} is not sequential")


def seeded_rng(name: str, task_id: str, seed: int) -> random.Random:
    """One generator per (transformation, task, seed): results do not depend on order or subset."""
    return random.Random(f"{name}/{task_id}/{seed}")


def tag(problem: Problem, perturbation: Perturbation, seed: int) -> Problem:
    extra = dict(problem.extra) | {
        "perturbation": perturbation.name, "category": perturbation.category, "seed": str(seed),
    }
    return problem.with_changes(extra=tuple(sorted(extra.items())))


def apply_seeded(perturbation: Perturbation, problem: Problem, seed: int) -> Problem:
    """Apply with the (name, task, seed) generator and record the perturbation in `extra`;
    a refusal comes back as the problem with its reason under `refused`."""
    rng = seeded_rng(perturbation.name, problem.task_id, seed)
    try:
        variant = perturbation.apply(problem, rng)
    except CannotApply as why:
        variant = problem.with_changes(extra=problem.extra + ((REFUSED, str(why)),))
    return tag(variant, perturbation, seed)
