"""Training data: MBPP train/validation (and optionally stdlib functions), perturbed, encoded, ordered.

Every epoch's order is a function of (seed, epoch) alone, so a resumed run sees the same batches
and several processes agree on them without talking.
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from quench.datasets import Problem, load_mbpp
from quench.datasets.problem import problem_from_json
from quench.errors import QuenchError
from quench.perturbations.catalog import perturbation_class
from quench.perturbations.pipeline import perturb_problems
from quench.perturbations.validate import nominal as nominal_of
from quench.training.config import DataSettings, TrainConfig
from quench.training.encoding import Encoded, align, encode, name_token_ids
from quench.training.targets import echo_mask_spans, renamed_identifiers, train_text

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VariantSample:
    """A perturbed variant with its nominal counterpart (the partial-code problem for code variants)."""

    nominal: Encoded
    variant: Encoded  # masked where mda asks for it
    aligned: tuple[tuple[int, int], ...]  # (nominal position, variant position) of shared target tokens
    names: frozenset[int]  # vocabulary ids of renamed identifiers (ALPD leaves them out)
    transform: str


@dataclass(frozen=True)
class Example:
    task_id: str
    original: Encoded  # the full-prompt problem
    variants: tuple[VariantSample, ...]


@dataclass(frozen=True)
class Item:
    """One unit of a batch: a single sequence, or a (nominal, variant) pair."""

    single: Encoded | None = None
    pair: VariantSample | None = None

    @property
    def sequences(self) -> tuple[Encoded, ...]:
        return (self.pair.nominal, self.pair.variant) if self.pair else (self.single,)  # type: ignore[return-value]


def training_problems(settings: DataSettings) -> list[Problem]:
    """MBPP train/validation problems (first `limit`), then the stdlib functions if asked for."""
    problems = [p for split in settings.splits for p in load_mbpp(split)]
    if settings.limit is not None:
        problems = problems[: settings.limit]
    if settings.stdlib:
        from quench.training.stdlib import stdlib_problems

        problems += stdlib_problems(settings.stdlib)
    return problems


def make_variants(problems: Sequence[Problem], settings: DataSettings, pool: Any = None) -> list[Problem]:
    """Changed, valid variants of every problem under every transformation and seed, deduplicated."""
    made = perturb_problems(problems, settings.transforms, settings.perturb_seeds,
                            validate_variants=settings.validate, pool=pool, profile=settings.profile)
    seen: set[tuple[str, str, str, str]] = set()
    out = []
    for (_, _), group in sorted(made.variants.items()):
        for variant in group:
            key = (variant.task_id, variant.prompt, variant.canonical_solution, variant.entry_point)
            if variant.meta("changed") == "true" and key not in seen:
                seen.add(key)
                out.append(variant)
    log.info("%d changed valid variants of %d problems", len(out), len(problems))
    return out


def load_or_make_variants(problems: Sequence[Problem], settings: DataSettings, path: Path,
                          pool: Any = None) -> list[Problem]:
    """The variants, made once and kept next to the checkpoint (a resumed run trains on the same)."""
    if path.is_file():
        return [problem_from_json(json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines() if line]
    variants = make_variants(problems, settings, pool) if settings.transforms else []
    staging = path.with_suffix(".tmp")
    staging.write_text("".join(json.dumps(v.to_json()) + "\n" for v in variants), encoding="utf-8")
    staging.replace(path)
    return variants


@dataclass(frozen=True)
class Encoder:
    """Turns problems into encoded sequences for one tokenizer and prompt format."""

    tokenizer: Any
    prompt_format: str
    format_prompt: Callable[[str], str]
    masked: bool  # mda: leave the perturbed echo out of the variants' loss

    def original(self, problem: Problem) -> Encoded:
        return encode(self.tokenizer, train_text(problem, self.prompt_format, self.format_prompt),
                      self.prompt_format == "completion")

    def variant(self, original: Problem, variant: Problem) -> VariantSample:
        category = perturbation_class(variant.meta("perturbation")).category
        base = nominal_of(original, category)
        base_text = train_text(base, self.prompt_format, self.format_prompt)
        text = train_text(variant, self.prompt_format, self.format_prompt)
        add_special = self.prompt_format == "completion"
        spans = echo_mask_spans(base_text, text) if self.masked else []
        nominal, perturbed = encode(self.tokenizer, base_text, add_special), encode(self.tokenizer, text, add_special, spans)
        names = renamed_identifiers(base_text.target, text.target)
        return VariantSample(nominal, perturbed, tuple(align(nominal, perturbed)),
                             name_token_ids(self.tokenizer, sorted(names)), variant.meta("perturbation"))


def build_examples(problems: Sequence[Problem], variants: Sequence[Problem], encoder: Encoder,
                   max_length: int) -> list[Example]:
    """Encoded examples; sequences longer than `max_length` are left out (logged), never cut."""
    by_task: dict[str, list[Problem]] = {}
    for v in variants:
        by_task.setdefault(v.task_id, []).append(v)
    examples, too_long = [], 0
    for problem in problems:
        original = encoder.original(problem)
        if len(original) > max_length:
            too_long += 1
            continue
        samples = [encoder.variant(problem, v) for v in by_task.get(problem.task_id, [])]
        fits = tuple(s for s in samples if max(len(s.nominal), len(s.variant)) <= max_length)
        too_long += len(samples) - len(fits)
        examples.append(Example(problem.task_id, original, fits))
    if too_long:
        log.info("left out %d sequences longer than --max-length %d", too_long, max_length)
    if not examples:
        raise QuenchError(f"no training example fits in --max-length {max_length}")
    return examples


def epoch_items(examples: Sequence[Example], config: TrainConfig, epoch: int) -> list[Item]:
    """The epoch's items in training order: a function of (seed, epoch) only."""
    rng = random.Random(f"quench-train/{config.seed}/{epoch}")
    items: list[Item] = []
    for example in examples:
        if config.paired:
            items.append(Item(pair=rng.choice(example.variants)) if example.variants else Item(single=example.original))
            continue
        items.append(Item(single=example.original))
        if config.strategies & {"da", "mda"}:
            k = min(config.data.variants_per_example, len(example.variants))
            items.extend(Item(single=s.variant) for s in rng.sample(example.variants, k))
    rng.shuffle(items)
    return items


def steps_per_epoch(num_items: int, batch_size: int, world: int) -> int:
    return -(-num_items // (batch_size * world))


def shard(items: Sequence[Item], step: int, batch_size: int, rank: int, world: int) -> list[Item]:
    """This process's items of the epoch's `step`-th global batch (the last one wraps around)."""
    start = step * batch_size * world + rank * batch_size
    return [items[(start + k) % len(items)] for k in range(batch_size)]
