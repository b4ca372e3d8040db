"""One forward pass, then the training objective: CE + alp * D_ALP + seq * L_seq + tok * L_tok.

`LogitsModule` computes the vocabulary projection only where a loss reads it (the trained
positions and the positions predicting aligned tokens), not at every prompt token: with a
49K-word vocabulary that is most of the memory. It is the module DDP wraps, so gradients of
everything it touches are synchronised.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from quench.training.batching import Batch
from quench.training.config import LossWeights
from quench.training.losses import (
    IGNORE, alp_distance, mean_pool, sequence_contrastive, token_contrastive, token_cross_entropy,
)


class LogitsModule(nn.Module):
    """A Hugging Face causal LM split into decoder and head; logits only at the asked positions."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden (N, T, H) of the last layer (after the final norm) and logits (M, V) at keep (N, T)."""
        decoder = self.model.get_decoder()
        hidden = decoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (N, T, H)
        logits = self.model.get_output_embeddings()(hidden[keep])  # (M, V)
        return hidden, logits


@dataclass(frozen=True)
class LossParts:
    total: torch.Tensor  # what backward runs on
    ce: float
    alp: float = 0.0
    seq: float = 0.0
    tok: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return {"loss": float(self.total.detach()), "ce": self.ce, "alp": self.alp, "seq": self.seq, "tok": self.tok}


def keep_mask(batch: Batch, with_alp: bool) -> torch.Tensor:
    """(N, T) positions whose logits a loss reads: trained targets, and predictions of aligned tokens."""
    keep = batch.targets != IGNORE
    if with_alp and batch.align_pair.numel():
        keep = keep.clone()
        keep[batch.pair_nominal[batch.align_pair], batch.align_nominal - 1] = True
        keep[batch.pair_variant[batch.align_pair], batch.align_variant - 1] = True
    return keep


def row_index(keep: torch.Tensor) -> torch.Tensor:
    """(N, T) -> the row of the (M, V) logits holding each kept position (-1 elsewhere)."""
    index = torch.full(keep.shape, -1, dtype=torch.long, device=keep.device)
    index[keep] = torch.arange(int(keep.sum()), device=keep.device)
    return index


def alp_keep(batch: Batch, vocab: int, name_dropout: bool) -> torch.Tensor | None:
    """(A, V) vocabulary entries compared per aligned token; None: all (plain ALP)."""
    if not name_dropout or batch.drop_pair.numel() == 0:
        return None
    per_pair = torch.ones(batch.pair_nominal.numel(), vocab, dtype=torch.bool, device=batch.drop_pair.device)
    per_pair[batch.drop_pair, batch.drop_token] = False  # (P, V)
    return per_pair[batch.align_pair]  # (A, V)


def compute_loss(module: nn.Module, batch: Batch, strategies: frozenset[str], weights: LossWeights) -> LossParts:
    with_alp = bool(strategies & {"alp", "alpd"})
    keep = keep_mask(batch, with_alp)
    hidden, logits = module(batch.input_ids, batch.attention_mask, keep)  # (N, T, H), (M, V)
    rows = row_index(keep)
    trained = batch.targets != IGNORE
    ce = token_cross_entropy(logits[rows[trained]], batch.targets[trained])
    total = ce
    parts: dict[str, float] = {}
    nominal_rows = batch.pair_nominal[batch.align_pair]  # (A,)
    variant_rows = batch.pair_variant[batch.align_pair]  # (A,)
    if with_alp:
        nominal_logits = logits[rows[nominal_rows, batch.align_nominal - 1]]  # (A, V)
        variant_logits = logits[rows[variant_rows, batch.align_variant - 1]]  # (A, V)
        keep_vocab = alp_keep(batch, logits.shape[-1], "alpd" in strategies)
        distance = alp_distance(nominal_logits, variant_logits, keep_vocab)
        total = total + weights.alp * distance
        parts["alp"] = float(distance.detach())
    if "cl-seq" in strategies:
        pooled = mean_pool(hidden, batch.region)  # (N, H)
        seq = sequence_contrastive(pooled[batch.pair_nominal], pooled[batch.pair_variant], weights.seq_temperature)
        total = total + weights.seq * seq
        parts["seq"] = float(seq.detach())
    if "cl-tok" in strategies:
        s = batch.align_sampled
        tok = token_contrastive(hidden[nominal_rows[s], batch.align_nominal[s]],
                                hidden[variant_rows[s], batch.align_variant[s]], batch.align_pair[s],
                                weights.tok_temperature)
        total = total + weights.tok * tok
        parts["tok"] = float(tok.detach())
    return LossParts(total, float(ce.detach()), **parts)
