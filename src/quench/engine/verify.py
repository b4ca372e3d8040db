"""Lossless verification of draft tokens against the target model (Leviathan et al. / Chen et al.).

Glossary (as in vLLM's rejection sampler):
- draft tokens: K tokens proposed per row; rows may propose fewer (ragged), padded with PLACEHOLDER.
- accepted tokens: the longest prefix of the draft the target agrees with.
- recovered token: at the first rejection, one token from norm(max(0, target_probs - draft_probs)).
- bonus token: when a row's whole draft is accepted, one token from the target at the next position.
- output = accepted + (recovered or bonus): between 1 and K + 1 tokens per row.

Greedy verification accepts while the draft equals the target argmax, so the output is exactly what
plain greedy decoding would produce.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from quench.engine.sampling import sample_rows

PLACEHOLDER = -1  # a missing draft / output token (ragged rows)


@dataclass(frozen=True)
class HeadColumns:
    """The vocabulary of a reduced draft head: its logits and probabilities cover these tokens only."""

    ids: torch.Tensor  # (V',) the full-vocabulary id of each column
    positions: torch.Tensor  # (V,) each token's column, -1 for tokens outside the head

    @classmethod
    def of(cls, ids: torch.Tensor, vocab_size: int) -> "HeadColumns":
        positions = torch.full((vocab_size,), -1, dtype=torch.long)
        positions[ids] = torch.arange(len(ids))
        return cls(ids, positions)


@dataclass(frozen=True)
class Verdict:
    """Per row: how many draft tokens were accepted, and the tokens to append."""

    num_accepted: torch.Tensor  # (B,) in 0..K
    tokens: torch.Tensor  # (B, K + 1): row b's output is tokens[b, : num_accepted[b] + 1], then PLACEHOLDER

    def row(self, b: int) -> list[int]:
        return self.tokens[b, : int(self.num_accepted[b]) + 1].tolist()


def _accepted_prefix(accept: torch.Tensor) -> torch.Tensor:
    """accept (B, K) bool -> length of the all-True prefix per row (B,)."""
    return accept.long().cumprod(dim=1).sum(dim=1)


def _assemble(draft_tokens: torch.Tensor, num_accepted: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
    """Accepted drafts, then `last` (B,) at index num_accepted, then PLACEHOLDER: (B, K + 1)."""
    batch, k = draft_tokens.shape
    padded = torch.cat([draft_tokens, draft_tokens.new_full((batch, 1), PLACEHOLDER)], dim=1)  # (B, K + 1)
    index = torch.arange(k + 1, device=draft_tokens.device)[None, :]  # (1, K + 1)
    tokens = torch.where(index < num_accepted[:, None], padded, PLACEHOLDER)
    return tokens.scatter(1, num_accepted[:, None], last[:, None])


def verify_greedy(draft_tokens: torch.Tensor, target_tokens: torch.Tensor) -> Verdict:
    """draft_tokens (B, K), target argmax tokens (B, K + 1) -> Verdict."""
    k = draft_tokens.shape[1]
    accept = (draft_tokens == target_tokens[:, :k]) & (draft_tokens != PLACEHOLDER)  # (B, K)
    num_accepted = _accepted_prefix(accept)
    last = target_tokens.gather(1, num_accepted[:, None]).squeeze(1)  # (B,) target's own next token
    return Verdict(num_accepted, _assemble(draft_tokens, num_accepted, last))


def verify_sampling(
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generators: list[torch.Generator],
    first: torch.Tensor | None = None,
    deterministic: torch.Tensor | None = None,
    draft_columns: HeadColumns | None = None,
) -> Verdict:
    """Speculative sampling; the output tokens follow target_probs exactly.

    draft_tokens (B, K). draft_probs (B, Kp, V) with Kp <= K: the draft distribution of each
    drafted token, or None for deterministic drafts (n-gram lookup: probability 1 on the proposed
    token). deterministic (B,) bool, optional: rows whose draft is deterministic although
    draft_probs is given (hybrid drafting's copied rows; their draft_probs rows are never read, and
    only they may draft past Kp). target_probs (B, K + 1, V); or, packed, (N, V) rows with first
    (B,): row b's target distribution for its draft token i is target_probs[first[b] + i] (a
    verification step's real positions only, without padding). One generator per row. Row b draws
    exactly (its draft length) uniforms and one final token, whatever its batch. draft_columns: the
    tokens of draft_probs' columns where it is (B, Kp, V') over a reduced draft head's tokens only (0
    elsewhere); it is spread over the whole vocabulary only at a rejection, for the recovered distribution.
    """
    batch, k = draft_tokens.shape
    if first is None:  # (B, K + 1, V) -> rows of (K + 1)
        first = torch.arange(batch) * target_probs.shape[1]
        target_probs = target_probs.flatten(0, 1)
    if draft_probs is None or deterministic is None:
        deterministic = torch.full((batch,), draft_probs is None)
    valid = draft_tokens != PLACEHOLDER  # (B, K)
    safe = draft_tokens.clamp(min=0)  # (B, K)
    at_drafts = (first[:, None] + torch.arange(k)[None, :]).clamp(max=target_probs.shape[0] - 1)  # (B, K)
    target_p = target_probs[at_drafts, safe]  # (B, K); junk where not valid
    draft_p = torch.ones_like(target_p)
    if draft_probs is not None and draft_probs.shape[1]:
        kp = draft_probs.shape[1]
        columns = safe[:, :kp] if draft_columns is None else draft_columns.positions[safe[:, :kp]]
        modelled = draft_probs.gather(-1, columns.clamp(min=0)[..., None]).squeeze(-1)  # (B, Kp)
        modelled = torch.where(columns >= 0, modelled, 0.0)  # a token outside a reduced head: never drafted
        draft_p[:, :kp] = torch.where(deterministic[:, None], 1.0, modelled)
    uniforms = torch.ones(batch, k)
    for b, generator in enumerate(generators):
        num_draft = int(valid[b].sum())
        uniforms[b, :num_draft] = torch.rand(num_draft, generator=generator)
    accept = valid & (uniforms * draft_p < target_p)  # u < target / draft, without dividing by 0
    num_accepted = _accepted_prefix(accept)
    final_probs = _final_distribution(draft_tokens, draft_probs, deterministic, target_probs, first + num_accepted,
                                      num_accepted, valid, draft_columns)
    last = sample_rows(final_probs, generators)
    return Verdict(num_accepted, _assemble(draft_tokens, num_accepted, last))


def _final_distribution(
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor | None,
    deterministic: torch.Tensor,
    target_probs: torch.Tensor,
    target_rows: torch.Tensor,
    num_accepted: torch.Tensor,
    valid: torch.Tensor,
    draft_columns: HeadColumns | None = None,
) -> torch.Tensor:
    """(B, V): the recovered distribution at a rejection, the target's (bonus) after a full accept.

    target_rows (B,): where each row's last token comes from among target_probs (N, V). Their gather is
    made into the residual in place, row by row, at the rejections only (at most B rows of V-wide
    passes, no (B, V) temporaries).
    """
    target_at = target_probs[target_rows]  # (B, V) a fresh gather
    k = draft_tokens.shape[1]
    if k == 0:
        return target_at
    at = num_accepted.clamp(max=k - 1)
    rejected = valid[torch.arange(len(at)), at] & (num_accepted < k)  # (B,) a draft token was rejected here
    positions, fixed = at.tolist(), deterministic.tolist()
    tokens = draft_tokens.gather(1, at[:, None])[:, 0].tolist()  # (B,) each row's token at `at`
    for b in torch.nonzero(rejected).squeeze(1).tolist():
        i = positions[b]
        row = target_at[b]  # (V,) a view: becomes max(0, target - draft), normalised
        if draft_probs is None or fixed[b] or i >= draft_probs.shape[1]:
            row[tokens[b]] = 0.0  # a deterministic draft: probability 1 on its token
        elif draft_columns is None:
            row.sub_(draft_probs[b, i]).clamp_(min=0.0)
        else:
            kept = row.index_select(0, draft_columns.ids).sub_(draft_probs[b, i]).clamp_(min=0.0)  # (V',)
            row.index_copy_(0, draft_columns.ids, kept)  # the draft is 0 elsewhere: the target stays there
        mass = row.sum()
        # A rejection with zero residual mass cannot happen in exact arithmetic; guard against rounding.
        if float(mass) > 0:
            row.div_(mass)
        else:
            row.copy_(target_probs[target_rows[b]])
    return target_at
