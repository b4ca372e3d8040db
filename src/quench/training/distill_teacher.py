"""The teacher's side of distillation: its top-k next-token distribution on every answer position.

Computed once per example (one batched forward of the target, no gradients) and cached in chunks
on disk, so training epochs cost only the draft's forward and backward, and a killed run resumes
from the last finished chunk. Keeping the top k log-probabilities (k=32 by default) instead of
all 49152 keeps the cache small; for code the top 32 hold nearly all of the target's mass, and
the loss renormalises over what is kept.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from quench.errors import QuenchError
from quench.training.distill_data import Example

log = logging.getLogger(__name__)

CHUNK = 32  # examples per cache file


@dataclass(frozen=True)
class TeacherTargets:
    """For the positions that predict an example's answer tokens (A = len(ids) - answer_start)."""

    logprobs: torch.Tensor  # (A, k) float16, the teacher's top-k log-probabilities, descending
    indices: torch.Tensor  # (A, k) int32 token ids


def pad_batch(examples: Sequence[Example]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids (B, T) and the loss mask (B, T): True where position t predicts an answer token.

    Right padding needs no attention mask: causal attention never lets a real token see padding.
    """
    width = max(len(e.ids) for e in examples)
    ids = torch.zeros(len(examples), width, dtype=torch.long)  # (B, T)
    mask = torch.zeros(len(examples), width, dtype=torch.bool)  # (B, T)
    for b, example in enumerate(examples):
        ids[b, : len(example.ids)] = torch.tensor(example.ids, dtype=torch.long)
        mask[b, example.answer_start - 1 : len(example.ids) - 1] = True
    return ids, mask


def hidden_states(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """Last-layer hidden states (B, T, Dm) of a causal LM, before its output head."""
    return model.model(input_ids=ids).last_hidden_state


@torch.inference_mode()
def teacher_batch(target: nn.Module, examples: Sequence[Example], top_k: int) -> list[TeacherTargets]:
    ids, mask = pad_batch(examples)
    hidden = hidden_states(target, ids)[mask]  # (N, Dm) only the answer positions go through the head
    logprobs = F.log_softmax(target.get_output_embeddings()(hidden).float(), dim=-1)  # (N, V)
    top = torch.topk(logprobs, top_k, dim=-1)  # (N, k)
    counts = mask.sum(dim=1).tolist()
    values, indices = top.values.half().split(counts), top.indices.int().split(counts)
    return [TeacherTargets(v.clone(), i.clone()) for v, i in zip(values, indices)]


def own_tokens(example: Example, top_k: int) -> TeacherTargets:
    """The example's own next tokens as a one-hot "teacher" (the KL then is cross-entropy on real code)."""
    answer = torch.tensor(example.ids[example.answer_start :], dtype=torch.int32)  # (A,)
    logprobs = torch.full((len(answer), top_k), float("-inf"), dtype=torch.float16)
    logprobs[:, 0] = 0.0  # probability 1 on the real token, 0 on the filler columns
    return TeacherTargets(logprobs, answer[:, None].expand(-1, top_k).contiguous())


def teacher_targets(
    target: nn.Module,
    examples: Sequence[Example],
    cache_dir: Path,
    top_k: int = 32,
    batch_size: int = 8,
    progress: Callable[[int], None] | None = None,
) -> list[TeacherTargets]:
    """Teacher targets of every example, read from `cache_dir` where a previous run left them."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    targets: list[TeacherTargets] = []
    for first in range(0, len(examples), CHUNK):
        chunk = examples[first : first + CHUNK]
        path = cache_dir / f"{first // CHUNK:05d}.pt"
        cached = _read_chunk(path, chunk, top_k)
        if cached is None:
            cached = []
            for start in range(0, len(chunk), batch_size):
                cached.extend(teacher_batch(target, chunk[start : start + batch_size], top_k))
            _write_chunk(path, chunk, cached)
        targets.extend(cached)
        if progress is not None:
            progress(len(chunk))
    return targets


def _write_chunk(path: Path, chunk: Sequence[Example], targets: list[TeacherTargets]) -> None:
    payload = {
        "keys": [e.key for e in chunk],
        "lengths": [len(e.ids) for e in chunk],
        "logprobs": [t.logprobs for t in targets],
        "indices": [t.indices for t in targets],
    }
    staging = path.with_name(path.name + ".tmp")
    torch.save(payload, staging)
    staging.replace(path)


def _read_chunk(path: Path, chunk: Sequence[Example], top_k: int) -> list[TeacherTargets] | None:
    """The cached chunk if it was made for exactly these examples and k; None to recompute."""
    if not path.is_file():
        return None
    try:
        payload = torch.load(path, weights_only=True)
    except Exception as err:  # a truncated or foreign file
        raise QuenchError(f"{path}: corrupt teacher cache ({err}); delete it to recompute") from None
    if payload["keys"] != [e.key for e in chunk] or payload["lengths"] != [len(e.ids) for e in chunk]:
        log.info("%s was made for other examples: recomputing", path)
        return None
    targets = [TeacherTargets(v, i) for v, i in zip(payload["logprobs"], payload["indices"])]
    if targets and targets[0].indices.shape[1] != top_k:
        return None
    return targets
