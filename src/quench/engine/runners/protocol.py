"""The `Runner` protocol: a causal LM driven over a `KVCache`, as the decode loop, the prefill and the drafters use it."""

from __future__ import annotations

from typing import Protocol

import torch

from quench.engine.kv_cache import KVCache


class Runner(Protocol):
    """A causal LM driven over a `KVCache` (the Llama fast path or the generic Hugging Face path)."""

    vocab_size: int

    def new_cache(self, batch: int, max_len: int) -> KVCache: ...

    def forward(
        self,
        cache: KVCache,
        tokens: torch.Tensor,
        start: torch.Tensor,
        logits_at: torch.Tensor | None = None,
        counts: torch.Tensor | None = None,
        hidden: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """tokens (B, S) fed at positions start[b] + s -> float32 logits (B, S, V), or (B, V) at logits_at.

        counts (B,), optional: row b's real tokens are its first counts[b]; a runner may skip the rest.
        hidden: also return the final-norm hidden states (B, S, D) (or (B, D) at logits_at), for GenGuard.
        """
        ...

    def prefill_kernel(self, tokens: int) -> str | None:
        """Which kernels a prefill feed of `tokens` tokens per row runs, where that alone fixes each token's
        keys/values and logits (two feeds with the same answer give a token the same bits); None where
        nothing is promised."""
        ...

    def packed_logits(
        self, cache: KVCache, tokens: torch.Tensor, start: torch.Tensor, counts: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Feed tokens as `forward` does -> float32 logits of the real tokens only: (N, V) with
        N = counts.sum(), row 0's counts[0] tokens first, then row 1's, and so on."""
        ...

    def greedy_tokens(
        self, cache: KVCache, tokens: torch.Tensor, start: torch.Tensor, counts: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Feed tokens as `forward` does -> the argmax token (first maximum) at each position (B, S).

        Greedy steps need nothing else; a runner may skip building float32 logits. Padding: any value.
        """
        ...
