"""The meaning check: a variant is kept only if it still means the same task.

- docstring: only the docstring prose changed (everything else byte-identical) and it parses;
- function name: the renamed reference passes the tests with the new `entry_point`;
- code syntax / format: perturbed partial prompt + (consistently edited) rest passes the tests;
- word-level docstring edits: the sentence encoder's cosine of old and new prose (`meaning.py`);
- a variant its transformation refused (it could not write it) is never valid, and counted apart.
Programs run in `quench.execution.SandboxPool`; identical programs run once. A variant whose
nominal reference already fails cannot be checked and is rejected with that reason.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol, Sequence

from quench.datasets import Problem
from quench.execution.program_build import program_for
from quench.perturbations import languages, meaning
from quench.perturbations.base import CODE_FORMAT, CODE_SYNTAX, DOCSTRING, FUNCTION_NAME, refusal
from quench.perturbations.source import cached_partial, parse
from quench.perturbations.text import docstring_text

log = logging.getLogger(__name__)
VALIDATION_TIMEOUT_S = 10.0  # generous: a slow reference (MBPP/123's) is not a broken one


class Runner(Protocol):
    def run_many(self, programs: Sequence[str]) -> list: ...  # list[ExecutionResult]


@dataclass(frozen=True)
class Verdict:
    valid: bool
    changed: bool
    reason: str = ""  # why a variant is not valid
    refused: bool = False  # the transformation could not write this variant (`base.CannotApply`)
    meaning: bool = False  # failed the sentence-encoder meaning check of its docstring wording


def refused_verdict(variant: Problem) -> Verdict | None:
    """The verdict on a variant its transformation refused, else None."""
    why = refusal(variant)
    return None if why is None else Verdict(False, False, why, refused=True)


def nominal(original: Problem, category: str) -> Problem:
    """What a variant is compared with: the partial-code problem for code categories."""
    return cached_partial(original) if category in (CODE_SYNTAX, CODE_FORMAT) else original


def is_changed(base: Problem, variant: Problem) -> bool:
    return (base.prompt, base.canonical_solution, base.entry_point) != (
        variant.prompt, variant.canonical_solution, variant.entry_point)


def parses(problem: Problem) -> bool:
    return parse(problem.prompt + problem.canonical_solution) is not None


def changed_region(old: str, new: str) -> tuple[int, int]:
    """[start, end) of `old` that differs from `new` (common prefix and suffix removed)."""
    prefix = 0
    limit = min(len(old), len(new))
    while prefix < limit and old[prefix] == new[prefix]:
        prefix += 1
    suffix = 0
    while suffix < limit - prefix and old[len(old) - 1 - suffix] == new[len(new) - 1 - suffix]:
        suffix += 1
    return prefix, len(old) - suffix


def check_docstring(base: Problem, variant: Problem) -> Verdict:
    if (base.canonical_solution, base.test, base.entry_point) != (
            variant.canonical_solution, variant.test, variant.entry_point):
        return Verdict(False, True, "changed more than the docstring")
    doc = docstring_text(base)
    start, end = changed_region(base.prompt, variant.prompt)
    if doc is None or start < doc.start or end > doc.end:
        return Verdict(False, True, "edited outside the docstring prose")
    if not parses(variant) or docstring_text(variant) is None:
        return Verdict(False, True, "the docstring no longer parses")
    return Verdict(True, True)


def static_verdict(base: Problem, variant: Problem, category: str) -> Verdict | None:
    """The verdict when no execution is needed, else None."""
    refused = refused_verdict(variant)
    if refused is not None:
        return refused
    if not is_changed(base, variant):
        return Verdict(True, False)
    if base.language != "python":
        reason = languages.static_check(base, variant, category)
        return None if reason is None else Verdict(not reason, True, reason)
    if not parses(base):
        return Verdict(False, True, "the nominal program does not parse")
    if category == DOCSTRING:
        return check_docstring(base, variant)
    if variant.test != base.test:
        return Verdict(False, True, "the test changed")
    if category == FUNCTION_NAME and not variant.entry_point.isidentifier():
        return Verdict(False, True, "the new name is not an identifier")
    if not parses(variant):
        return Verdict(False, True, "does not parse")
    return None


def validate(pairs: Sequence[tuple[Problem, Problem, str]], runner: Runner | None = None,
             meaning_check: bool = True) -> list[Verdict]:
    """Verdicts for (original, variant, category) triples; runs what needs running in one batch.
    `meaning_check`: score word-level docstring edits with the sentence encoder (where installed)."""
    verdicts: list[Verdict | None] = []
    programs: dict[str, int] = {}
    for original, variant, category in pairs:
        verdict = static_verdict(nominal(original, category), variant, category)
        verdicts.append(verdict)
        if verdict is None:
            programs.setdefault(program_for(original, original.canonical_solution), len(programs))
            programs.setdefault(program_for(variant, variant.canonical_solution), len(programs))
    results = run(list(programs), runner) if programs else []
    out = []
    for (original, variant, _), verdict in zip(pairs, verdicts):
        if verdict is None:
            if not results[programs[program_for(original, original.canonical_solution)]].passed:
                verdict = Verdict(False, True, "the nominal reference fails")
            else:
                result = results[programs[program_for(variant, variant.canonical_solution)]]
                verdict = Verdict(result.passed, True, "" if result.passed else f"reference {result.outcome.value}")
        out.append(verdict)
    return check_wording(pairs, out) if meaning_check else out


def prose(problem: Problem) -> str:
    doc = docstring_text(problem)
    return "" if doc is None else problem.prompt[doc.start:doc.end]


def check_wording(pairs: Sequence[tuple[Problem, Problem, str]], verdicts: list[Verdict]) -> list[Verdict]:
    """Valid, changed word-level docstring variants scored against their original's prose; those
    below `meaning.THRESHOLD` fail. Unchanged where the encoder is not installed."""
    todo = [i for i, ((_, variant, category), verdict) in enumerate(zip(pairs, verdicts))
            if category == DOCSTRING and verdict.valid and verdict.changed
            and variant.meta("perturbation") in meaning.WORD_LEVEL]
    if not todo or meaning.encoder() is None:
        return verdicts
    originals, variants = [prose(pairs[i][0]) for i in todo], [prose(pairs[i][1]) for i in todo]
    scores = meaning.encoder().decisive_similarity(originals, variants)
    out = list(verdicts)
    for i, score in zip(todo, scores):
        if not meaning.keeps_meaning(score):
            out[i] = Verdict(False, True, f"meaning check: cosine {score:.3f} < {meaning.THRESHOLD}", meaning=True)
    return out


@dataclass(frozen=True)
class SandboxRunner:
    """A `Runner` that starts a `SandboxPool` for each batch of programs and stops it afterwards.

    `allow_unconfined`: run them even where the pool cannot confine them (`--unsafe-unconfined`).
    """

    workers: int | None = None
    timeout_s: float = VALIDATION_TIMEOUT_S
    allow_unconfined: bool = False

    def run_many(self, programs: Sequence[str]) -> list:
        from quench.execution import SandboxLimits, SandboxPool

        log.info("validating: running %d programs", len(programs))
        with SandboxPool(self.workers, SandboxLimits(timeout_s=self.timeout_s),
                         allow_unconfined=self.allow_unconfined) as pool:
            return pool.run_many(programs)


def run(programs: list[str], runner: Runner | None) -> list:
    return (runner or SandboxRunner()).run_many(programs)
