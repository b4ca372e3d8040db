"""Log-probabilities of the tokens a live decode loop commits, with the likeliest alternatives.

They are the model's own: log-softmax of the target's logits at the position that predicted the
token, before temperature, top-p or top-k (as vLLM and the OpenAI API report them). A speculative
step's accepted drafts and its bonus token each read their own position of the step's logits.

Greedy steps normally never build float logits (`Runner.greedy_tokens` may take the argmax from a
screened head); `ScoringRunner` sends them through `forward` instead, so only loops whose rows ask
for log-probabilities pay for them (`quench.engine.serving.live` records a step's logits only when one of its rows asked).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from quench.engine.kernels import native
from quench.engine.scheduler import PrefixStore

MAX_TOP = 20  # alternatives per position, at most (the OpenAI API's limit)


@dataclass(frozen=True)
class TokenLogprob:
    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]  # (token, logprob) of the likeliest tokens there, likeliest first


def score_token(logits: torch.Tensor, token: int, top: int) -> TokenLogprob:
    """logits (V,) of the position that predicted `token` -> its log-probability and the `top` likeliest."""
    logprobs = torch.log_softmax(logits.float(), dim=-1)  # (V,)
    alternatives: tuple[tuple[int, float], ...] = ()
    if top:
        values, ids = torch.topk(logprobs, min(top, logprobs.shape[-1]))  # (top,)
        alternatives = tuple(zip(ids.tolist(), values.tolist()))
    return TokenLogprob(token, float(logprobs[token]), alternatives)


@dataclass(frozen=True)
class StepLogits:
    """One decode step's logits: padded (B, S, V), or packed (N, V) with each slot's first row in `offsets`."""

    logits: torch.Tensor
    offsets: list[int] | None = None  # packed: slot b's position i is row offsets[b] + i

    def at(self, slot: int, position: int) -> torch.Tensor:
        if self.offsets is None:
            return self.logits[slot, position]  # (V,)
        return self.logits[self.offsets[slot] + position]  # (V,)


class ScoringRunner:
    """A target runner that keeps each decode step's logits (a copy: sampling then changes them in place).

    Prefills (`logits_at` given) are passed through untouched: a row's first token reads its prompt's
    logits from the prefix store."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.last: StepLogits | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.runner, name)

    def forward(self, cache, tokens: torch.Tensor, start: torch.Tensor, **kwargs):
        out = self.runner.forward(cache, tokens, start, **kwargs)
        if kwargs.get("logits_at") is None:
            logits = out[0] if kwargs.get("hidden") else out  # (B, S, V)
            self.last = StepLogits(logits.clone())
        return out

    def greedy_tokens(self, cache, tokens: torch.Tensor, start: torch.Tensor, counts=None) -> torch.Tensor:
        return native.argmax(self.forward(cache, tokens, start, counts=counts))  # (B, S)

    def packed_logits(self, cache, tokens: torch.Tensor, start: torch.Tensor, counts=None) -> torch.Tensor:
        logits = self.runner.packed_logits(cache, tokens, start, counts=counts)  # (N, V)
        if counts is None:
            offsets = [b * tokens.shape[1] for b in range(tokens.shape[0])]
        else:
            offsets = (torch.cumsum(counts, dim=0) - counts).tolist()
        self.last = StepLogits(logits.clone(), offsets)
        return logits


class ScoredPrefixes(PrefixStore):
    """A prefix store that remembers the prompt logits it hands out: each row's first token reads them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.handed: dict[int, torch.Tensor] = {}  # request index -> logits (V,) after its prompt

    def get(self, request_index: int) -> tuple[Any, torch.Tensor]:
        prefix, logits = super().get(request_index)
        self.handed[request_index] = logits
        return prefix, logits
