"""One sequence being generated (a row of the batch), with what it draws with and when it stops, and the rules
that finish it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from quench.engine.row_settings import GREEDY, DrawSettings, RowLimits
from quench.engine.types import GenerationRequest, GenerationResult, StopHook, cut_at_stop


@dataclass
class Row:
    """Sample `sample_index` of request `request_index`, living in one slot of the batch.

    `tokens` holds the prompt and every generated token. The last token has not been fed to the
    model yet, so the target's KV cache is valid for exactly `len(tokens) - 1` positions. The row draws
    with `draw` and `generator` (seeded from its request's seed, key and its sample index) and stops
    within `limits`, whatever else shares the batch.
    """

    request_index: int
    request: GenerationRequest
    sample_index: int
    generator: torch.Generator
    tokens: list[int]
    prompt_len: int
    draw: DrawSettings = GREEDY
    limits: RowLimits = RowLimits()
    started: float = field(default_factory=time.perf_counter)
    steps: int = 0  # target forward passes this row took part in
    drafted: int = 0  # draft tokens proposed for this row
    accepted: int = 0  # draft tokens accepted

    @property
    def length(self) -> int:
        """Positions of this row whose keys/values are in the cache (= start of the next forward)."""
        return len(self.tokens) - 1

    @property
    def generated(self) -> list[int]:
        return self.tokens[self.prompt_len :]

    @property
    def last(self) -> int:
        return self.tokens[-1]


class StopRules:
    """EOS, max new tokens, text stop sequences and the stopping hook, checked after each token.

    A row stops within its own `RowLimits` and within the rules' bounds over every row: `max_new_tokens`
    (the earlier of the two ends a row) and `ignore_eos` (every row keeps EOS like any other token).
    """

    def __init__(
        self, tokenizer: Any, eos_ids: frozenset[int], max_new_tokens: int, hook: StopHook | None = None,
        ignore_eos: bool = False,
    ) -> None:
        self.tokenizer = tokenizer
        self.eos_ids = eos_ids
        self.max_new_tokens = max_new_tokens
        self.hook = hook
        self.ignore_eos = ignore_eos

    def most_new_tokens(self, row: Row) -> int:
        """The generated tokens `row` may hold, at most."""
        return min(self.max_new_tokens, row.limits.max_new_tokens)

    def append(self, row: Row, token: int) -> str | None:
        """Append one token; return the finish reason if the row is now done."""
        row.tokens.append(token)
        generated = row.generated
        if token in self.eos_ids and not (self.ignore_eos or row.limits.ignore_eos):
            return "eos"
        if row.request.stop_sequences or self.hook is not None:
            text = self.decode(generated)
            if row.request.stop_sequences and cut_at_stop(text, row.request.stop_sequences)[1]:
                return "stop"
            if self.hook is not None and self.hook(row.request, generated, text):
                return "hook"
        if len(generated) >= self.most_new_tokens(row):
            return "length"
        return None

    def decode(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    def result(self, row: Row, reason: str, started: float) -> GenerationResult:
        now = time.perf_counter()
        # As the reference backend does: the EOS token is not part of the sample.
        tokens = row.generated[:-1] if reason == "eos" else row.generated
        text, _ = cut_at_stop(self.decode(tokens), row.request.stop_sequences)
        cut = getattr(self.hook, "cut", None)
        if reason == "hook" and cut is not None:
            text = cut(row.request, text)  # the hook's stop line is excess (quench.stopping.RuleHook)
        extra = {"finish_s": now - started, "steps": float(row.steps)}
        if row.drafted:
            extra["drafted"] = float(row.drafted)
            extra["accepted"] = float(row.accepted)
            extra["acceptance_rate"] = row.accepted / row.drafted
            extra["mean_accepted_length"] = row.accepted / max(row.steps, 1)
        return GenerationResult(
            key=row.request.key,
            sample_index=row.sample_index,
            token_ids=tuple(tokens),
            text=text,
            finish_reason=reason,
            seconds=now - row.started,
            extra=extra,
        )


def eos_token_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """The ids that end a sequence: the model's generation config (what `generate` uses) and the tokenizer's."""
    ids: set[int] = set()
    generation_config = getattr(model, "generation_config", None)
    for source in (getattr(generation_config, "eos_token_id", None), getattr(tokenizer, "eos_token_id", None)):
        if isinstance(source, int):
            ids.add(source)
        elif source is not None:
            ids.update(int(i) for i in source)
    return frozenset(ids)
