"""`quench draft train`: distil a small draft model for speculative decoding from any target.

Pipeline (each phase resumes where a killed run stopped; `out/` holds everything):
  1. answers.jsonl       the target's greedy answers to MBPP train + validation prompts and to
                         stdlib signatures + docstrings (distill_data); sampled.jsonl: further answers
                         to the same prompts sampled at a temperature (--sampled-answers)
  2. (in memory)         real functions with docstrings from the installed standard library
  3. teacher/            the target's top-k log-probabilities on every answer position (distill_teacher)
  4. state.pt            training: forward KL(teacher || draft) on answer tokens (distill_train)
  5. draft.safetensors   the draft's own weights (quench.models.draft format), loadable with --draft PATH

The draft starts from copies of some of the target's layers (first and last by default) over the
target's frozen embedding and head; only its layers and final norm train.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from torch import nn

from quench.datasets import Problem
from quench.models import LoadedModel
from quench.models.draft import build_draft, save_draft
from quench.training.distill_data import (
    Example, fit_length, generate_answers, prompt_key, sampled_problems, stdlib_examples, stdlib_prompts, training_prompts,
)
from quench.training.distill_teacher import TeacherTargets, own_tokens, teacher_targets
from quench.training.distill_train import (
    DistillConfig, Evaluation, HeadView, NoProgress, Progress, evaluate, frequent_tokens, is_heldout, train_draft,
)

log = logging.getLogger(__name__)

DRAFT_FILE = "draft.safetensors"
ANSWERS_FILE = "answers.jsonl"
SAMPLED_FILE = "sampled.jsonl"
STDLIB_PREFIX = "stdlib/"

__all__ = ["DistillConfig", "DistillResult", "Evaluation", "Progress", "answer_prompts", "distill", "distillation_examples",
           "evaluate_by_source"]


@dataclass(frozen=True)
class DistillResult:
    draft_path: Path
    steps: int
    train_examples: int
    heldout_examples: int
    head_tokens: int  # size of the draft's head (the vocabulary size when not reduced)
    before: Evaluation  # the initial draft on the held-out examples
    after: Evaluation
    after_by_source: tuple[tuple[str, Evaluation], ...] = ()  # (source, held-out figures), see source_of


def answer_prompts(config: DistillConfig) -> list[Problem]:
    """What the target answers: MBPP train + validation, then stdlib signatures + docstrings (no evaluation set)."""
    return training_prompts(config.prompts) + stdlib_prompts(config.stdlib_prompts, config.stdlib_functions, config.seed)


def source_of(key: str) -> str:
    """Where an example comes from: its key up to the first '/' ("MBPP", "stdlib", "stdlib-answer", "sampled1")."""
    return key.split("/", 1)[0]


def evaluate_by_source(
    draft: nn.Module, head: HeadView, examples: Sequence[Example], teachers: Sequence[TeacherTargets]
) -> tuple[tuple[str, Evaluation], ...]:
    """Held-out figures per source, sorted by source name."""
    sources = sorted({source_of(e.key) for e in examples})
    picked = {s: [i for i, e in enumerate(examples) if source_of(e.key) == s] for s in sources}
    return tuple((s, evaluate(draft, head, [examples[i] for i in picked[s]], [teachers[i] for i in picked[s]]))
                 for s in sources)


def distillation_examples(target: LoadedModel, config: DistillConfig, out: Path, progress: Progress) -> list[Example]:
    """The target's answers (generated now or read back) and stdlib functions, cut to config.max_tokens."""
    prompts = answer_prompts(config)
    progress.begin("answers", len(prompts))
    answers = generate_answers(target, prompts, out / ANSWERS_FILE, max_new_tokens=config.max_new_tokens,
                               progress=progress.advance)
    progress.end()
    sampled: list[Example] = []
    if config.sampled_answers:
        again = sampled_problems(prompts, config.sampled_answers)
        progress.begin("sampled answers", len(again))
        sampled = generate_answers(target, again, out / SAMPLED_FILE, max_new_tokens=config.max_new_tokens,
                                   progress=progress.advance, temperature=config.sample_temperature, seed=config.seed)
        progress.end()
    stdlib = stdlib_examples(target, config.stdlib_functions, config.seed, max_tokens=4 * config.max_tokens)
    return [fit_length(e, config.max_tokens, config.max_tokens // 2) for e in answers + sampled + stdlib]


def targets_for(
    target: LoadedModel, examples: list[Example], config: DistillConfig, out: Path, progress: Progress
) -> list[TeacherTargets]:
    """The target's top-k on its own answers (and on stdlib code when asked); real next tokens otherwise.

    The teacher pass is the costliest phase after generation (a target forward per example);
    real code's own tokens are free labels, which is what lets the recipe fit its time budget.
    """
    soft = [i for i, e in enumerate(examples) if config.stdlib_labels == "teacher" or not e.key.startswith(STDLIB_PREFIX)]
    progress.begin("teacher", len(soft))
    labelled = teacher_targets(target.model, [examples[i] for i in soft], out / "teacher", config.top_k,
                               progress=progress.advance)
    progress.end()
    targets = [own_tokens(e, config.top_k) for e in examples]
    for i, teacher in zip(soft, labelled):
        targets[i] = teacher
    return targets


def distill(
    target: LoadedModel, out: Path, config: DistillConfig = DistillConfig(), progress: Progress | None = None
) -> DistillResult:
    """Run (or resume) the whole pipeline and write out/draft.safetensors."""
    progress = progress or NoProgress()
    out.mkdir(parents=True, exist_ok=True)
    (out / "distill.json").write_text(json.dumps({"target": target.name, **asdict(config)}, indent=2) + "\n")
    examples = distillation_examples(target, config, out, progress)
    teachers = targets_for(target, examples, config, out, progress)
    # by prompt: a sampled answer is held out with its prompt's greedy answer, so no held-out prompt is trained on
    held = [is_heldout(prompt_key(e.key), config.heldout_every) for e in examples]
    train = [i for i, h in enumerate(held) if not h]
    heldout = [i for i, h in enumerate(held) if h]
    head_ids = None
    if config.head_tokens:
        eos = [t for t in [target.tokenizer.eos_token_id, target.tokenizer.pad_token_id] if t is not None]
        head_ids = frequent_tokens([examples[i] for i in train], config.head_tokens, eos)
    draft = build_draft(target.model, config.source_layers)
    head = HeadView(target.model.get_output_embeddings().weight, head_ids)
    held_examples, held_teachers = [examples[i] for i in heldout], [teachers[i] for i in heldout]
    before = evaluate(draft, head, held_examples, held_teachers)
    log.info("held-out before training: %s", before)
    steps = train_draft(draft, head, [examples[i] for i in train], [teachers[i] for i in train], config, out, progress)
    after = evaluate(draft, head, held_examples, held_teachers)
    by_source = evaluate_by_source(draft, head, held_examples, held_teachers)
    log.info("held-out after training: %s; by source: %s", after, by_source)
    draft.to(target.model.get_output_embeddings().weight.dtype)
    extra = {"before": json.dumps(asdict(before)), "after": json.dumps(asdict(after)), "distill": json.dumps(asdict(config)),
             "after_by_source": json.dumps({s: asdict(e) for s, e in by_source})}
    path = out / DRAFT_FILE
    save_draft(path, draft, target.tokenizer, target.name, extra, head_ids)
    return DistillResult(path, steps, len(train), len(heldout), len(head_ids) if head_ids is not None else
                         head.weight.shape[0], before, after, by_source)
