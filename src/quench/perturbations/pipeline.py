"""`perturb_problems`: every requested transformation x seed over a problem set, validated.

The result keeps, per (transformation, seed), the variants that passed the meaning check
(unchanged problems included: they are the nominal prompt and trivially valid), the rejected
ones with a reason, and per-transformation shares of changed, valid and refused variants (a
refused one, which its transformation could not write, is never kept in either profile).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from quench.datasets import Problem
from quench.perturbations import languages, meaning
from quench.perturbations.base import CODE_FORMAT, CODE_SYNTAX, Perturbation, apply_seeded, tag
from quench.perturbations.catalog import create, perturbation_class
from quench.perturbations.profile import QUENCH, Profile, resolve_profile
from quench.perturbations.release import file_name, nominal_partial_rows, recode_row, write_recode
from quench.perturbations.validate import Runner, Verdict, is_changed, nominal, refused_verdict, validate

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Rejection:
    task_id: str
    transform: str
    seed: int
    reason: str


@dataclass(frozen=True)
class TransformStats:
    name: str
    category: str
    variants: int  # problems x seeds
    changed: int  # variants that differ from the nominal prompt
    valid: int  # variants kept (unchanged ones count as valid)
    seconds: float  # time spent perturbing (validation excluded)
    refused: int = 0  # variants the transformation could not write: never kept, not valid
    meaning_failed: int = 0  # changed variants whose wording failed the sentence-encoder meaning check

    @property
    def share_refused(self) -> float:
        return self.refused / self.variants if self.variants else 0.0

    @property
    def share_changed(self) -> float:
        return self.changed / self.variants if self.variants else 0.0

    @property
    def share_valid(self) -> float:
        return self.valid / self.variants if self.variants else 0.0

    @property
    def share_changed_valid(self) -> float:
        """Of the variants that changed, the share that passed the meaning check."""
        unchanged = self.variants - self.changed - self.refused
        return (self.valid - unchanged) / self.changed if self.changed else 1.0


@dataclass
class PerturbationSet:
    variants: dict[tuple[str, int], list[Problem]]  # valid variants per (transformation, seed)
    stats: dict[str, TransformStats]
    rejected: list[Rejection]
    originals: dict[str, Problem] = field(default_factory=dict)  # by task_id
    validated: bool = True
    validation_seconds: float = 0.0
    profile: Profile = QUENCH
    not_applicable: dict[str, str] = field(default_factory=dict)  # transformation -> why it was not applied
    refusals: list[Rejection] = field(default_factory=list)  # variants their transformation could not write
    meaning_check: dict[str, object] | None = None  # the encoder and threshold used; None: not scored

    def summary(self) -> dict[str, object]:
        return {
            "profile": self.profile.name,
            "validated": self.validated,
            "failed_check_kept": self.profile.keep_invalid,
            "meaning_check": self.meaning_check,
            "validation_seconds": round(self.validation_seconds, 2),
            "transformations": {
                name: {"category": s.category, "variants": s.variants, "changed": s.changed, "valid": s.valid,
                       "refused": s.refused, "meaning_failed": s.meaning_failed, "share_changed": round(s.share_changed, 4),
                       "share_valid": round(s.share_valid, 4), "share_refused": round(s.share_refused, 4),
                       "perturb_seconds": round(s.seconds, 3)}
                for name, s in self.stats.items()
            },
            "rejected": [r.__dict__ for r in self.rejected],
            "refused": [r.__dict__ for r in self.refusals],
            "not_applicable": self.not_applicable,
        }


def apply_all(perturbation: Perturbation, problems: Sequence[Problem], seeds: Sequence[int],
              on_made: Callable[[int], None] = lambda count: None) -> dict[int, list[Problem]]:
    """Variants per seed; a transformation that ignores randomness is applied once.
    `on_made` is told how many variants were just made: one per problem, or a seed's all at once."""
    out: dict[int, list[Problem]] = {}
    for seed in seeds:
        if not perturbation.randomized and out:
            first = next(iter(out.values()))
            out[seed] = [tag(p, perturbation, seed) for p in first]
            on_made(len(problems))
        elif perturbation.sequential:
            out[seed] = [tag(p, perturbation, seed) for p in perturbation.apply_sequence(problems, seed)]
            on_made(len(problems))
        else:
            out[seed] = []
            for problem in problems:
                out[seed].append(apply_seeded(perturbation, problem, seed))
                on_made(1)
    return out


def perturb_problems(
    problems: Sequence[Problem],
    transforms: Sequence[str],
    seeds: int | Sequence[int] = 5,
    validate_variants: bool = True,
    pool: Runner | None = None,
    model: object | None = None,
    profile: Profile | str = QUENCH,
    on_transform: Callable[[str], None] | None = None,
    on_variants: Callable[[str, int], None] | None = None,
    meaning_check: bool = True,
) -> PerturbationSet:
    """Apply each transformation with each seed; keep the variants that keep their meaning.

    `seeds`: a count (0..n-1) or explicit seeds. `pool`: anything with `run_many(programs)`
    (a started `SandboxPool`); None starts one when needed. `model`: a `TextModel` for the
    model-based transformations (default: `quench.models.load_model()`, loaded on first use).
    `profile`: "quench" (default) or "recode" (see `quench.perturbations.profile`).
    `on_transform`: told each transformation's name once its variants are made (progress).
    `on_variants`: told a transformation's name and a count of variants as they are made, of
    len(transforms) x seeds x len(problems) in all (progress within a transformation).
    `meaning_check`: drop word-level docstring variants the sentence encoder scores below its
    threshold (`quench.perturbations.meaning`; skipped where the encoder is not installed).
    """
    profile = resolve_profile(profile)
    seed_list = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    not_applicable = languages.inapplicable(transforms, problems)
    transforms = [name for name in transforms if name not in not_applicable]
    produced, seconds, triples = make_variants(problems, transforms, seed_list, profile, model, on_transform, on_variants)
    start = time.perf_counter()
    verdicts = judge_variants(triples, pool, validate_variants, meaning_check)
    result = collect(produced, seconds, verdicts, problems, profile.keep_invalid)
    result.profile = profile
    result.not_applicable = not_applicable
    result.validated = validate_variants
    scored = validate_variants and meaning_check and meaning.available()
    result.meaning_check = {"encoder": meaning.ENCODER, "threshold": meaning.THRESHOLD} if scored else None
    result.validation_seconds = time.perf_counter() - start if validate_variants else 0.0
    return result


Triple = tuple[Problem, Problem, str]  # (the variant's baseline, the variant, its transformation's category)


def make_variants(
    problems: Sequence[Problem],
    transforms: Sequence[str],
    seed_list: list[int],
    profile: Profile,
    model: object | None,
    on_transform: Callable[[str], None] | None,
    on_variants: Callable[[str, int], None] | None,
) -> tuple[dict[str, dict[int, list[Problem]]], dict[str, float], list[Triple]]:
    """Each transformation's variants per seed (the code categories' made from the partial-code baselines), the
    seconds each took, and every (baseline, variant, category) to judge, in that order."""
    partials = [profile.partial(p) for p in problems]  # the baseline of the code categories
    produced: dict[str, dict[int, list[Problem]]] = {}
    seconds: dict[str, float] = {}
    triples: list[Triple] = []
    for name in transforms:
        cls = perturbation_class(name)
        kwargs = {"model": model} if cls.model_based and model is not None else {}
        perturbation = languages.adapt(create(name, profile.name, **kwargs), problems)
        code = cls.category in (CODE_SYNTAX, CODE_FORMAT)
        start = time.perf_counter()
        made = (lambda count, name=name: on_variants(name, count)) if on_variants else (lambda count: None)
        produced[name] = apply_all(perturbation, partials if code and not perturbation.splits_itself else problems,
                                   seed_list, made)
        seconds[name] = time.perf_counter() - start
        log.info("%s: %d variants in %.2f s", name, len(problems) * len(seed_list), seconds[name])
        if on_transform:
            on_transform(name)
        baselines = partials if code else problems
        triples += [(original, variant, cls.category)
                    for variants in produced[name].values() for original, variant in zip(baselines, variants)]
    return produced, seconds, triples


def judge_variants(triples: list[Triple], pool: Runner | None, validate_variants: bool,
                   meaning_check: bool) -> list[Verdict]:
    """Each variant's verdict: validated in the sandbox (`validate`), or without validation only refused where it
    cannot run at all and marked changed where it differs from its baseline."""
    if validate_variants:
        return validate(triples, pool, meaning_check)
    return [refused_verdict(v) or Verdict(True, is_changed(nominal(o, c), v)) for o, v, c in triples]


def collect(produced: dict[str, dict[int, list[Problem]]], seconds: dict[str, float],
            verdicts: list[Verdict], problems: Sequence[Problem], keep_invalid: bool = False) -> PerturbationSet:
    verdict_iter = iter(verdicts)
    variants: dict[tuple[str, int], list[Problem]] = {}
    stats: dict[str, TransformStats] = {}
    rejected: list[Rejection] = []
    refusals: list[Rejection] = []
    for name, by_seed in produced.items():
        total = changed = valid = refused = failed_wording = 0
        for seed, problems_for_seed in by_seed.items():
            kept = []
            for variant in problems_for_seed:
                verdict = next(verdict_iter)
                total += 1
                changed += verdict.changed
                refused += verdict.refused
                failed_wording += verdict.meaning
                if verdict.valid or (keep_invalid and not verdict.refused):
                    kept.append(variant.with_changes(extra=variant.extra + (("changed", str(verdict.changed).lower()),)))
                if verdict.valid:
                    valid += 1
                else:
                    (refusals if verdict.refused else rejected).append(
                        Rejection(variant.task_id, name, seed, verdict.reason))
            variants[(name, seed)] = kept
        stats[name] = TransformStats(name, perturbation_class(name).category, total, changed, valid, seconds[name],
                                     refused, failed_wording)
    return PerturbationSet(variants, stats, rejected, {p.task_id: p for p in problems}, refusals=refusals)


def write_set(result: PerturbationSet, out_dir: Path, benchmark: str) -> list[Path]:
    """ReCode-named JSONL files, one per (transformation, seed), the nominal partial prompts in
    ReCode's layout (`{benchmark}_partial.jsonl`), and `summary.json`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    partial = result.profile.partial
    for (name, seed), variants in result.variants.items():
        path = out_dir / file_name(benchmark, name, seed)
        category = perturbation_class(name).category
        write_recode(path, (recode_row(result.originals[v.task_id], v, category, v.meta("changed") == "true", partial)
                            for v in variants))
        paths.append(path)
    nominal_path = out_dir / f"{benchmark}_partial.jsonl"
    write_recode(nominal_path, nominal_partial_rows(result.originals.values(), partial))
    paths.append(nominal_path)
    summary = out_dir / "summary.json"
    summary.write_text(json.dumps(result.summary(), indent=2) + "\n", encoding="utf-8")
    return [*paths, summary]
