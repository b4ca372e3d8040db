"""Training a draft by distillation: the loss, the schedule, and a resumable loop.

Loss: forward KL(teacher || draft) per answer position, over the teacher's top-k tokens
renormalised (Hinton et al.'s distillation at temperature 1). With a reduced head (the N most
frequent answer tokens) the teacher's mass outside the head is dropped before renormalising: the
draft can only ever propose tokens inside its head, and verification stays lossless because the
recovered distribution covers the rest.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from quench.errors import QuenchError
from quench.training.distill_config import DistillConfig
from quench.training.distill_data import Example
from quench.training.distill_teacher import TeacherTargets, hidden_states, pad_batch

log = logging.getLogger(__name__)

STATE_FILE = "state.pt"
LOG_FILE = "train_log.jsonl"


class Progress(Protocol):
    def begin(self, phase: str, total: int) -> None: ...

    def advance(self, count: int = 1, **info: float) -> None: ...

    def end(self) -> None: ...


class NoProgress:
    def begin(self, phase: str, total: int) -> None:
        log.info("%s: %d to do", phase, total)

    def advance(self, count: int = 1, **info: float) -> None:
        return None

    def end(self) -> None:
        return None


@dataclass(frozen=True)
class Evaluation:
    kl: float  # mean KL(teacher || draft) per answer token, over the teacher's top-k
    agreement: float  # share of answer positions where the draft's argmax is the teacher's argmax


class HeadView:
    """The rows of the target's head the draft scores, and where each vocabulary id sits among them."""

    def __init__(self, head_weight: torch.Tensor, token_ids: torch.Tensor | None) -> None:
        vocab = head_weight.shape[0]
        self.token_ids = token_ids
        self.weight = head_weight if token_ids is None else head_weight[token_ids].detach()  # (V', Dm)
        self.position = torch.arange(vocab) if token_ids is None else torch.full((vocab,), -1, dtype=torch.long)
        if token_ids is not None:
            self.position[token_ids] = torch.arange(len(token_ids))  # (V,) -1 = not in the draft's head

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return F.linear(hidden, self.weight.to(hidden.dtype)).float()  # (N, V')


def frequent_tokens(examples: Sequence[Example], count: int, always: Sequence[int]) -> torch.Tensor:
    """The `count` most frequent answer tokens (ties by id), always including `always` (e.g. EOS)."""
    counts: dict[int, int] = {}
    for example in examples:
        for token in example.ids[example.answer_start :]:
            counts[token] = counts.get(token, 0) + 1
    ranked = sorted(counts, key=lambda t: (-counts[t], t))
    chosen = list(dict.fromkeys([*always, *ranked]))[:count]
    return torch.tensor(sorted(chosen), dtype=torch.long)


def distill_loss(
    draft: nn.Module, head: HeadView, examples: Sequence[Example], teachers: Sequence[TeacherTargets]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean forward KL(teacher || draft) over answer positions, and the argmax agreement (no gradient)."""
    ids, mask = pad_batch(examples)
    hidden = hidden_states(draft, ids)[mask]  # (N, Dm)
    draft_logprobs = F.log_softmax(head.logits(hidden), dim=-1)  # (N, V')
    teacher_logprobs = torch.cat([t.logprobs.float() for t in teachers])  # (N, k)
    slots = head.position[torch.cat([t.indices for t in teachers]).long()]  # (N, k) -1 = outside the head
    kept = slots >= 0
    teacher_probs = teacher_logprobs.exp() * kept
    teacher_probs = teacher_probs / teacher_probs.sum(dim=-1, keepdim=True).clamp_min(1e-12)  # renormalised top-k
    at = draft_logprobs.gather(-1, slots.clamp_min(0))  # (N, k)
    kl = (teacher_probs * (teacher_probs.clamp_min(1e-30).log() - at)).sum(dim=-1)  # (N,)
    agreement = (draft_logprobs.argmax(dim=-1) == slots[:, 0]).float().mean()
    return kl.mean(), agreement.detach()


def learning_rate(config: DistillConfig, step: int, total: int) -> float:
    if step < config.warmup_steps:
        return config.learning_rate * (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, total - config.warmup_steps)
    cosine = 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))
    return config.learning_rate * (config.min_lr_ratio + (1 - config.min_lr_ratio) * cosine)


def epoch_order(count: int, seed: int, epoch: int) -> list[int]:
    order = list(range(count))
    random.Random(f"{seed}/{epoch}").shuffle(order)
    return order


def is_heldout(key: str, every: int) -> bool:
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % every == 0


def trainable(draft: nn.Module) -> list[nn.Parameter]:
    return [p for p in draft.parameters() if p.requires_grad]


def _autocast(draft: nn.Module) -> torch.autocast:
    """bfloat16 matmuls where the frozen target weights are bfloat16 (faster than float32 ones on CPUs with bfloat16 units)."""
    dtype = draft.get_output_embeddings().weight.dtype
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16)


@torch.no_grad()
def evaluate(draft: nn.Module, head: HeadView, examples: Sequence[Example], teachers: Sequence[TeacherTargets],
             batch_size: int = 8) -> Evaluation:
    kl_sum = agree_sum = positions = 0.0
    for start in range(0, len(examples), batch_size):
        batch, targets = examples[start : start + batch_size], teachers[start : start + batch_size]
        count = sum(len(t.indices) for t in targets)
        with _autocast(draft):
            kl, agreement = distill_loss(draft, head, batch, targets)
        kl_sum, agree_sum, positions = kl_sum + float(kl) * count, agree_sum + float(agreement) * count, positions + count
    return Evaluation(kl_sum / max(positions, 1), agree_sum / max(positions, 1))


def _save_state(path: Path, draft: nn.Module, optimizer: torch.optim.Optimizer, step: int, config: DistillConfig) -> None:
    state = {
        "step": step,
        "weights": {name: p.detach().clone() for name, p in draft.named_parameters() if p.requires_grad},
        "optimizer": optimizer.state_dict(),
        "rng": torch.get_rng_state(),
        "config": json.dumps(asdict(config), sort_keys=True),
    }
    staging = path.with_name(path.name + ".tmp")
    torch.save(state, staging)
    staging.replace(path)  # atomic: a kill during the save keeps the previous checkpoint


def _load_state(path: Path, draft: nn.Module, optimizer: torch.optim.Optimizer, config: DistillConfig) -> int:
    """Restore a checkpoint into draft and optimizer; the number of steps it had done."""
    try:
        state = torch.load(path, weights_only=True)
        saved_config = state["config"]
    except Exception as err:  # truncated, foreign or from another version
        raise QuenchError(f"{path}: corrupt training checkpoint ({err}); delete it to start over") from None
    if saved_config != json.dumps(asdict(config), sort_keys=True):
        raise QuenchError(f"{path}: checkpoint of a run with other settings; use another --out or delete it")
    params = dict(draft.named_parameters())
    with torch.no_grad():
        for name, value in state["weights"].items():
            params[name].copy_(value)
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"])
    return int(state["step"])


def train_draft(
    draft: nn.Module,
    head: HeadView,
    examples: Sequence[Example],
    teachers: Sequence[TeacherTargets],
    config: DistillConfig,
    out: Path,
    progress: Progress | None = None,
) -> int:
    """Distil into `draft` in place (its trainable weights become float32); resumes from out/state.pt."""
    progress = progress or NoProgress()
    for p in trainable(draft):
        p.data = p.data.float()  # float32 master weights; matmuls may still run in bfloat16 (autocast)
    optimizer = torch.optim.AdamW(trainable(draft), lr=config.learning_rate, weight_decay=0.0)
    per_epoch = math.ceil(len(examples) / config.batch_size)
    total = per_epoch * config.epochs
    out.mkdir(parents=True, exist_ok=True)
    state_path = out / STATE_FILE
    step = _load_state(state_path, draft, optimizer, config) if state_path.is_file() else 0
    progress.begin("train", total)
    progress.advance(step)
    draft.train()
    with (out / LOG_FILE).open("a") as train_log:
        while step < total:
            epoch, batch = divmod(step, per_epoch)
            order = epoch_order(len(examples), config.seed, epoch)[batch * config.batch_size :][: config.batch_size]
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(config, step, total)
            with _autocast(draft):
                kl, agreement = distill_loss(draft, head, [examples[i] for i in order], [teachers[i] for i in order])
            kl.backward()
            kl = kl.detach()
            torch.nn.utils.clip_grad_norm_(trainable(draft), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            train_log.write(json.dumps({"step": step, "kl": round(float(kl), 4), "agreement": round(float(agreement), 4)}) + "\n")
            if step % config.checkpoint_every == 0 or step == total:
                train_log.flush()
                _save_state(state_path, draft, optimizer, step, config)
            progress.advance(1, kl=float(kl), agree=float(agreement))
    draft.eval()
    progress.end()
    return total
