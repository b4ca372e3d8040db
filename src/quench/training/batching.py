"""Collate items into padded tensors plus the index tensors the pair losses read."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Sequence

import torch

from quench.training.data import Item
from quench.training.encoding import Encoded
from quench.training.losses import IGNORE


@dataclass(frozen=True)
class Batch:
    input_ids: torch.Tensor  # (N, T) right-padded
    attention_mask: torch.Tensor  # (N, T)
    targets: torch.Tensor  # (N, T) the token position t must predict (ids[t+1]) or IGNORE
    region: torch.Tensor  # (N, T) bool: target tokens (masked ones included), pooled by cl-seq
    pair_nominal: torch.Tensor  # (P,) row of each pair's nominal sequence
    pair_variant: torch.Tensor  # (P,) row of each pair's variant
    align_pair: torch.Tensor  # (A,) pair of each aligned token
    align_nominal: torch.Tensor  # (A,) its position in the nominal row (>= 1: position - 1 predicts it)
    align_variant: torch.Tensor  # (A,) its position in the variant row
    align_sampled: torch.Tensor  # (A,) bool: among the tokens cl-tok contrasts (at most k per pair)
    drop_pair: torch.Tensor  # (D,) ALPD: pair whose logit distance leaves out ...
    drop_token: torch.Tensor  # (D,) ... this vocabulary id

    @property
    def num_tokens(self) -> int:
        return int(self.attention_mask.sum())

    def to(self, device: torch.device | str) -> "Batch":
        return Batch(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})


def row_tensors(seq: Encoded, length: int, pad_id: int) -> tuple[list[int], list[int], list[int], list[bool]]:
    n = len(seq)
    ids = list(seq.input_ids) + [pad_id] * (length - n)
    mask = [1] * n + [0] * (length - n)
    targets = [IGNORE] * length
    for t in range(max(seq.target_start - 1, 0), n - 1):
        if t + 1 >= seq.target_start and t + 1 not in seq.masked:
            targets[t] = seq.input_ids[t + 1]
    region = [seq.target_start <= t < n for t in range(length)]
    return ids, mask, targets, region


def sample_aligned(count: int, k: int, generator: torch.Generator) -> list[bool]:
    if count <= k:
        return [True] * count
    chosen = set(torch.randperm(count, generator=generator)[:k].tolist())
    return [i in chosen for i in range(count)]


def collate(items: Sequence[Item], pad_id: int, tok_max_aligned: int, generator: torch.Generator) -> Batch:
    """Rows in item order (a pair gives two adjacent rows); aligned tokens at position 0 are skipped."""
    sequences = [seq for item in items for seq in item.sequences]
    length = max(len(s) for s in sequences)
    rows = [row_tensors(s, length, pad_id) for s in sequences]
    pair_nominal, pair_variant, align_pair, align_nom, align_var, sampled, drop_pair, drop_token = ([] for _ in range(8))
    row = 0
    for item in items:
        if item.pair is not None:
            p = len(pair_nominal)
            pair_nominal.append(row)
            pair_variant.append(row + 1)
            kept = [(a, b) for a, b in item.pair.aligned if a >= 1 and b >= 1]
            align_pair.extend([p] * len(kept))
            align_nom.extend(a for a, _ in kept)
            align_var.extend(b for _, b in kept)
            sampled.extend(sample_aligned(len(kept), tok_max_aligned, generator))
            names = sorted(item.pair.names)
            drop_pair.extend([p] * len(names))
            drop_token.extend(names)
        row += len(item.sequences)

    def long(values: list) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long)

    return Batch(
        long([r[0] for r in rows]), long([r[1] for r in rows]), long([r[2] for r in rows]),
        torch.tensor([r[3] for r in rows], dtype=torch.bool),
        long(pair_nominal), long(pair_variant), long(align_pair), long(align_nom), long(align_var),
        torch.tensor(sampled, dtype=torch.bool), long(drop_pair), long(drop_token),
    )
