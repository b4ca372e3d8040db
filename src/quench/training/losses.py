"""The robust-training losses as pure tensor functions (formulas and constants: docs/training.md).

Glossary: a *pair* is a nominal sequence and its perturbed variant trained in the same batch;
*aligned tokens* are target tokens the two share (encoding.align); A is their number.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

IGNORE = -100


def token_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over the trained positions. logits (M, V), targets (M,)."""
    if targets.numel() == 0:
        return logits.sum() * 0.0  # keeps the graph (DDP wants every step to reach the parameters)
    return F.cross_entropy(logits.float(), targets)


def alp_distance(nominal_logits: torch.Tensor, variant_logits: torch.Tensor,
                 keep: torch.Tensor | None = None) -> torch.Tensor:
    """Adversarial logit pairing (Kannan et al. 2018) on aligned tokens, on centered logits.

    D = 1/A sum_a 1/|K_a| sum_{v in K_a} ((z_av - mean_K z_a) - (z~_av - mean_K z~_a))^2
    z, z~: (A, V) logits predicting the aligned tokens; keep (A, V) bool: K_a, the vocabulary
    entries compared (all, or all but the renamed names' tokens for ALPD). Centering removes the
    per-position shift softmax ignores, so only differences in the distributions are penalised.
    """
    if nominal_logits.shape[0] == 0:
        return nominal_logits.sum() * 0.0
    diff = nominal_logits.float() - variant_logits.float()  # (A, V)
    weight = torch.ones_like(diff) if keep is None else keep.to(diff.dtype)  # (A, V)
    count = weight.sum(dim=-1, keepdim=True).clamp_min(1.0)  # (A, 1)
    centered = diff - (diff * weight).sum(dim=-1, keepdim=True) / count  # (A, V)
    per_token = (centered.square() * weight).sum(dim=-1) / count.squeeze(-1)  # (A,)
    return per_token.mean()


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of hidden states over the masked positions. hidden (N, T, H), mask (N, T) -> (N, H)."""
    weight = mask.to(hidden.dtype).unsqueeze(-1)  # (N, T, 1)
    return (hidden * weight).sum(dim=1) / weight.sum(dim=1).clamp_min(1.0)


def info_nce(similarity: torch.Tensor) -> torch.Tensor:
    """Symmetric InfoNCE: row i's positive is column i. similarity (P, P) logits, -inf = excluded."""
    labels = torch.arange(similarity.shape[0], device=similarity.device)
    return 0.5 * (F.cross_entropy(similarity, labels) + F.cross_entropy(similarity.T, labels))


def sequence_contrastive(nominal: torch.Tensor, variant: torch.Tensor, temperature: float) -> torch.Tensor:
    """ContraSeq: each pair's nominal and variant are positives, the batch's other variants negatives.

    L = 1/2 [ -1/P sum_i log softmax_j(s_ij)_i  -  1/P sum_j log softmax_i(s_ij)_j ],
    s_ij = cos(u_i, u~_j) / temperature; u, u~: (P, H) pooled representations. P = 1 gives 0.
    """
    if nominal.shape[0] == 0:
        return nominal.sum() * 0.0
    similarity = F.normalize(nominal.float(), dim=-1) @ F.normalize(variant.float(), dim=-1).T  # (P, P)
    return info_nce(similarity / temperature)


def token_contrastive(nominal: torch.Tensor, variant: torch.Tensor, pair: torch.Tensor,
                      temperature: float) -> torch.Tensor:
    """ContraToken: an aligned token's positive is its counterpart, negatives the pair's other aligned tokens.

    nominal, variant: (A, H) hidden states of the aligned tokens; pair: (A,) pair index.
    s_ab = cos(h_a, h~_b) / temperature for a, b of the same pair (other pairs excluded), then
    the symmetric InfoNCE of `sequence_contrastive` over that block-diagonal matrix.
    """
    if nominal.shape[0] == 0:
        return nominal.sum() * 0.0
    similarity = F.normalize(nominal.float(), dim=-1) @ F.normalize(variant.float(), dim=-1).T  # (A, A)
    same_pair = pair.unsqueeze(0) == pair.unsqueeze(1)  # (A, A)
    return info_nce((similarity / temperature).masked_fill(~same_pair, float("-inf")))
