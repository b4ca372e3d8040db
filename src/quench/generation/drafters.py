"""Drafters propose the next K tokens of every row; the target verifies them (see verify.py).

- `NgramDrafter` (prompt lookup): finds the latest earlier occurrence of the row's last n tokens in
  its own prompt + output and proposes what followed. Deterministic: draft probability 1.
- `ModelDrafter`: a small causal LM sharing the target's tokenizer, run autoregressively over its
  own ragged KV cache; its tokens are drawn from the same processed distribution that verification
  divides by, as lossless speculative sampling requires.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import torch

from quench.generation.kv_cache import KVCache
from quench.generation.rows import Row
from quench.generation.sampling import logits_to_probs, sample_rows
from quench.generation.scheduler import PrefixStore, Runner, WorkItem
from quench.generation.types import SamplingParams
from quench.generation.verify import PLACEHOLDER


@dataclass(frozen=True)
class Draft:
    tokens: torch.Tensor  # (B, K), PLACEHOLDER where a row proposes fewer
    probs: torch.Tensor | None  # (B, K, V) draft distribution of each token; None = deterministic

    @property
    def width(self) -> int:
        """Drafted positions actually used by some row (the verification forward feeds 1 + width)."""
        used = (self.tokens != PLACEHOLDER).sum(dim=1)
        return int(used.max()) if used.numel() else 0


class Drafter(Protocol):
    def admit(self, slots: Sequence[tuple[int, WorkItem]]) -> None:
        """New rows entered these slots (their prompts are in the items)."""
        ...

    def release(self, request_index: int) -> None:
        """No further sample of this request will start."""
        ...

    def propose(self, rows: Sequence[Row | None], limits: Sequence[int], sampling: SamplingParams) -> Draft:
        """Up to limits[b] tokens for each row (0 for empty slots)."""
        ...


class NgramIndex:
    """For each n-gram seen so far, the position right after its latest occurrence that has a follower."""

    def __init__(self, max_n: int) -> None:
        self.max_n = max_n
        self.next_position: dict[tuple[int, ...], int] = {}
        self.indexed = 0  # tokens[: indexed] are in the index

    def extend(self, tokens: list[int]) -> None:
        for i in range(max(self.indexed, 1), len(tokens)):
            for n in range(1, min(self.max_n, i) + 1):
                self.next_position[tuple(tokens[i - n : i])] = i
        self.indexed = len(tokens)

    def lookup(self, tokens: list[int], k: int, min_n: int) -> list[int]:
        """The tokens that followed the longest matching suffix (n from max_n down to min_n)."""
        for n in range(min(self.max_n, len(tokens)), min_n - 1, -1):
            position = self.next_position.get(tuple(tokens[-n:]))
            if position is not None:
                return tokens[position : position + k]
        return []


class NgramDrafter:
    """Prompt-lookup drafting (no model): n-grams of the row's own prompt and output."""

    def __init__(self, batch_size: int, max_n: int = 3, min_n: int = 1) -> None:
        self.max_n = max_n
        self.min_n = min_n
        self.indexes: list[NgramIndex | None] = [None] * batch_size

    def admit(self, slots: Sequence[tuple[int, WorkItem]]) -> None:
        for slot, _ in slots:
            self.indexes[slot] = NgramIndex(self.max_n)

    def release(self, request_index: int) -> None:
        return None

    def propose(self, rows: Sequence[Row | None], limits: Sequence[int], sampling: SamplingParams) -> Draft:
        k = max(limits, default=0)
        tokens = torch.full((len(rows), k), PLACEHOLDER, dtype=torch.long)  # (B, K)
        for b, row in enumerate(rows):
            index = self.indexes[b]
            if row is None or index is None or limits[b] == 0:
                continue
            index.extend(row.tokens)
            proposal = index.lookup(row.tokens, limits[b], self.min_n)
            if proposal:
                tokens[b, : len(proposal)] = torch.tensor(proposal, dtype=torch.long)
        return Draft(tokens, None)


class ModelDrafter:
    """A draft model with its own KV cache; keeps in step with the committed tokens of each row."""

    def __init__(self, runner: Runner, batch_size: int, max_len: int) -> None:
        self.runner = runner
        self.cache: KVCache = runner.new_cache(batch_size, max_len)
        self.prefixes = PrefixStore(runner)
        # What this cache holds per slot: the row's first `base` tokens, then `fed` draft tokens.
        self.base = [0] * batch_size
        self.fed: list[list[int]] = [[] for _ in range(batch_size)]

    def admit(self, slots: Sequence[tuple[int, WorkItem]]) -> None:
        self.prefixes.ensure([item for _, item in slots])
        for slot, item in slots:
            prefix, _ = self.prefixes.get(item.request_index)
            self.cache.install(slot, prefix)
            self.base[slot], self.fed[slot] = prefix.length, []

    def release(self, request_index: int) -> None:
        self.prefixes.release(request_index)

    def _valid(self, slot: int, row: Row) -> int:
        """Positions of the slot whose cached keys/values match the row's committed tokens."""
        kept = 0
        for token in self.fed[slot]:
            if self.base[slot] + kept >= len(row.tokens) or row.tokens[self.base[slot] + kept] != token:
                break
            kept += 1
        return min(self.base[slot] + kept, len(row.tokens) - 1)

    @torch.inference_mode()
    def propose(self, rows: Sequence[Row | None], limits: Sequence[int], sampling: SamplingParams) -> Draft:
        batch, k = len(rows), max(limits, default=0)
        tokens = torch.full((batch, k), PLACEHOLDER, dtype=torch.long)  # (B, K)
        if k == 0:
            return Draft(tokens, None)
        logits = self._catch_up(rows)  # (B, V) logits for each row's first draft token
        scratch = torch.Generator()  # draws past a row's own limit must not advance its generator
        lengths = torch.tensor([len(row.tokens) if row is not None else 0 for row in rows])  # (B,)
        live = torch.tensor([int(row is not None) for row in rows])  # (B,) empty slots feed nothing
        probs_steps: list[torch.Tensor] = []
        for i in range(k):
            if sampling.greedy:
                step = logits.argmax(dim=-1)  # (B,)
            else:
                probs = logits_to_probs(logits, sampling)  # (B, V)
                generators = [r.generator if r is not None and i < limits[b] else scratch for b, r in enumerate(rows)]
                step = sample_rows(probs, generators)
                probs_steps.append(probs)
            tokens[:, i] = step
            if i + 1 < k:
                logits = self.runner.forward(self.cache, step[:, None], lengths + i, counts=live)[:, 0]  # (B, V)
        for b, row in enumerate(rows):
            self.base[b], self.fed[b] = (len(row.tokens), tokens[b, : k - 1].tolist()) if row is not None else (0, [])
            tokens[b, limits[b] :] = PLACEHOLDER
        probs = torch.stack(probs_steps, dim=1) if probs_steps else None  # (B, K, V)
        return Draft(tokens, probs)

    def _catch_up(self, rows: Sequence[Row | None]) -> torch.Tensor:
        """Feed each row's committed tokens that this cache lacks (at least the last one)."""
        valid = [self._valid(b, row) if row is not None else 0 for b, row in enumerate(rows)]
        missing = [row.tokens[v:] if row is not None else [0] for v, row in zip(valid, rows)]
        start = torch.tensor(valid)  # (B,)
        width = max(len(m) for m in missing)
        tokens = torch.zeros(len(rows), width, dtype=torch.long)  # (B, S), right-padded
        for b, m in enumerate(missing):
            tokens[b, : len(m)] = torch.tensor(m, dtype=torch.long)
        last = torch.tensor([len(m) - 1 for m in missing])  # (B,)
        counts = torch.tensor([len(m) if row is not None else 0 for m, row in zip(missing, rows)])  # (B,)
        return self.runner.forward(self.cache, tokens, start, logits_at=last, counts=counts)
